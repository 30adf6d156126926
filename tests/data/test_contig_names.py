"""Contigs are found by full ID, accession (with or without version) or a unique prefix."""

from __future__ import annotations

from pathlib import Path

import pytest

from biomoe.data.contig_names import (AmbiguousContigError, ContigNames, UnknownContigError, accession_of)
from biomoe.data.sources.reader import ContigInfo
from biomoe.inference.generate import parse_region

GI = "gi|208433976|ref|NC_011333.1|"


class _Reader:
    def __init__(self, contigs):
        self.contigs = contigs
        self.paths = sorted({c.path for c in contigs})


def _names(*ids: str) -> ContigNames:
    return ContigNames(_Reader([ContigInfo(name, 100, Path("g.fa")) for name in ids]))


@pytest.mark.parametrize("contig_id, accession", [
    (GI, "NC_011333.1"),
    ("gi|123|gb|CP000468.1|", "CP000468.1"),
    ("gi|5|emb|AL123456.3|", "AL123456.3"),
    ("gi|5|dbj|AP009048.1|", "AP009048.1"),
    ("NC_011333.1", "NC_011333.1"),
    ("NZ_CP012345.1", "NZ_CP012345.1"),
    ("lcl|ORF1", "ORF1"),
    ("lcl|my_seq", None),
    ("my contig", None),
])
def test_accession_of_ncbi_and_plain_ids(contig_id, accession):
    assert accession_of(contig_id) == accession


def test_full_id_accession_unversioned_and_prefix_resolve():
    names = _names(GI, "gi|9|ref|NC_000913.3|", "plasmid_pX")
    assert names.resolve(GI) == 0
    assert names.resolve("NC_011333.1") == 0
    assert names.resolve("NC_011333") == 0
    assert names.resolve("NC_000913") == 1
    assert names.resolve("gi|9") == 1
    assert names.resolve("plasmid") == 2
    assert names.id_of("NC_000913.3") == "gi|9|ref|NC_000913.3|"
    assert "NC_011333" in names and "NC_011333.2" not in names  # another version is another sequence


def test_exact_id_wins_over_accession_and_prefix():
    names = _names("chr1", "chr1_random", "NC_1.1")
    assert names.resolve("chr1") == 0  # also a prefix of chr1_random: the exact ID decides
    assert names.resolve("NC_1.1") == 2


def test_a_prefix_that_cuts_a_number_is_not_a_match():
    names = _names("chr10", "chr2")
    with pytest.raises(UnknownContigError, match="contig 'chr1' is not in the genome"):
        names.resolve("chr1")
    with pytest.raises(AmbiguousContigError):
        names.resolve("chr")  # no digit cut short, but two contigs


def test_ambiguous_names_list_up_to_three_candidates_in_one_line():
    names = _names("contig_a", "contig_b", "contig_c", "contig_d")
    with pytest.raises(AmbiguousContigError) as caught:
        names.resolve("contig")
    message = str(caught.value)
    assert "\n" not in message and "contig_a, contig_b, contig_c and 1 more" in message
    assert caught.value.candidates == ["contig_a", "contig_b", "contig_c", "contig_d"]
    versions = _names("gi|1|ref|NC_5.1|", "gi|2|ref|NC_5.2|")
    with pytest.raises(AmbiguousContigError, match="gi\\|1\\|ref\\|NC_5.1\\|, gi\\|2\\|ref\\|NC_5.2\\|"):
        versions.resolve("NC_5")
    assert versions.resolve("NC_5.2") == 1


def test_record_names_of_files_that_share_them_are_ambiguous():
    reader = _Reader([ContigInfo("a#chr1", 10, Path("a.fa"), record="chr1"),
                      ContigInfo("b#chr1", 10, Path("b.fa"), record="chr1", file_index=1),
                      ContigInfo("chr2", 10, Path("b.fa"), file_index=1)])
    names = ContigNames(reader)
    assert names.resolve("b#chr1") == 1 and names.resolve("chr2") == 2
    with pytest.raises(AmbiguousContigError, match="a#chr1, b#chr1"):
        names.resolve("chr1")


def test_unknown_and_empty_names_are_errors():
    names = _names("chrA")
    for bad in ("chrB", ""):
        with pytest.raises(UnknownContigError):
            names.resolve(bad)


@pytest.mark.parametrize("text, parsed", [
    (f"{GI}:100-200", (GI, 99, 200)),
    ("NC_011333.1:100,001-101,000", ("NC_011333.1", 100000, 101000)),
    (GI, (GI, None, None)),
    ("chr1", ("chr1", None, None)),
])
def test_regions_with_colons_and_bars_in_the_contig_id_parse(text, parsed):
    assert parse_region(text) == parsed


def test_generate_prompt_region_by_accession_and_ambiguity_is_one_line(tiny_checkpoint, write_fasta, tmp_path, capsys):
    from biomoe.cli.main import main as cli_main
    from conftest import random_dna

    seq = random_dna(300, seed=3)
    fasta = write_fasta({GI: seq, "gi|7|ref|NC_011334.1|": random_dna(300, seed=4)})
    common = ["generate", str(tiny_checkpoint), "--fasta", str(fasta), "--length", "5", "--seed", "1",
              "--include-prompt"]
    for name in ("NC_011333.1", "NC_011333", GI):
        out = tmp_path / "s.fa"
        assert cli_main([*common, "--prompt-region", f"{name}:11-40", "--out", str(out)]) == 0
        header, *lines = out.read_text().splitlines()
        assert header.startswith(f">sample_1 prompt={GI}:11-40 ") and "".join(lines)[:30] == seq[10:40]
    capsys.readouterr()
    assert cli_main([*common, "--prompt-region", "gi:1-10", "--out", str(tmp_path / "x.fa")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "ambiguous" in err and GI in err and "NC_011334.1" in err
    assert not (tmp_path / "x.fa").exists()
