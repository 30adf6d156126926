"""GFF3 CDS features as a per-base coding mask; malformed annotations are one-line errors."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from biomoe.genomics.annotation import coding_mask, read_cds_intervals
from biomoe.errors import GenomeInputError

GFF = """##gff-version 3
##sequence-region NC_001416.1 1 100
NC_001416.1\tRefSeq\tregion\t1\t100\t.\t+\t.\tID=r
NC_001416.1\tRefSeq\tgene\t11\t30\t.\t+\t.\tID=gene-a
NC_001416.1\tRefSeq\tCDS\t11\t30\t.\t+\t0\tParent=gene-a
NC_001416.1\tRefSeq\tCDS\t25\t40\t.\t-\t0\tParent=gene-b
other\tRefSeq\tCDS\t1\t5\t.\t+\t0\tParent=gene-c
##FASTA
>NC_001416.1
ACGT
"""


def test_cds_features_become_a_half_open_mask(tmp_path):
    path = tmp_path / "a.gff3"
    path.write_text(GFF)
    assert read_cds_intervals(path) == {"NC_001416.1": [(10, 30), (24, 40)], "other": [(0, 5)]}
    mask = coding_mask(path, "NC_001416.1", 100)
    assert mask.sum() == 30 and mask[10:40].all() and not mask[:10].any() and not mask[40:].any()
    # An old-style NCBI FASTA name carries the accession as one '|' field; gzip is read too.
    zipped = tmp_path / "a.gff3.gz"
    zipped.write_bytes(gzip.compress(GFF.encode()))
    np.testing.assert_array_equal(coding_mask(zipped, "gi|9626243|ref|NC_001416.1|", 100), mask)


@pytest.mark.parametrize("text, contig, length, problem", [
    ("chr\tx\tCDS\tten\t20\t.\t+\t0\t.\n", "chr", 100, "line 1: start/end 'ten'/'20' are not integers"),
    ("# c\nchr\tx\tCDS\t30\t20\t.\t+\t0\t.\n", "chr", 100, "line 2: need 1 <= start <= end, got 30..20"),
    ("chr x CDS 1 20 . + 0 .\n", "chr", 100, "line 1: expected 9 tab-separated GFF3 columns, got 1"),
    ("chr\tx\tCDS\t1\t200\t.\t+\t0\t.\n", "chr", 100, "runs past the contig's 100 bases"),
    ("chr\tx\tCDS\t1\t20\t.\t+\t0\t.\n", "chrII", 100, "no CDS features for contig 'chrII' (seqids with CDS: chr)"),
])
def test_bad_annotations_are_one_line_errors_naming_the_file(tmp_path, text, contig, length, problem):
    path = tmp_path / "bad.gff"
    path.write_text(text)
    with pytest.raises(GenomeInputError) as info:
        coding_mask(path, contig, length)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and problem in message and "\n" not in message


def test_missing_and_binary_files(tmp_path):
    with pytest.raises(GenomeInputError, match="cannot read annotation"):
        coding_mask(tmp_path / "nope.gff", "chr", 10)
    binary = tmp_path / "bin.gff"
    binary.write_bytes(b"\xff\xfe\x00\x81" * 100)
    with pytest.raises(GenomeInputError, match="not a text GFF3 file"):
        coding_mask(binary, "chr", 10)
