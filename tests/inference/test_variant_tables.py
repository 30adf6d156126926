"""Plain variant tables as users write them: header rows with or without ``#``, in any case and
column order, blank and whitespace-only lines, comments anywhere, Windows line endings; a real
row that is malformed is still one line naming the file and the line."""

from __future__ import annotations

import pytest
import torch

from biomoe.cli.main import main as cli_main
from biomoe.errors import GenomeInputError
from biomoe.inference.score_variants import Variant, read_variants
from biomoe.model.transformer import MoETransformer
from conftest import random_dna, save_checkpoint

SNV = [Variant("chr1", 5, "A", "G"), Variant("chr1", 6, "C", "T")]


def _table(tmp_path, text: str):
    path = tmp_path / "v.tsv"
    path.write_bytes(text.encode())  # bytes: the line endings exactly as written
    return path


@pytest.mark.parametrize("header", [
    "#chrom\tpos\tref\talt",
    "# chrom pos ref alt",
    "chrom pos ref alt",
    "CHROM\tPOS\tREF\tALT",
    "Contig\tPosition\tRef\tAlt",
])
def test_a_header_row_with_or_without_hash_is_not_a_variant(tmp_path, header):
    table = _table(tmp_path, f"{header}\nchr1\t5\tA\tG\nchr1 6 C T\n")
    assert read_variants(table) == SNV


@pytest.mark.parametrize("header, row", [
    ("pos chrom alt ref", "5 chr1 G A"),
    ("#pos\tchrom\talt\tref", "5\tchr1\tG\tA"),
    ("REF ALT CHROM POS ID", "A G chr1 5 rs1"),
    ("#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO", "chr1\t5\trs1\tA\tG\t.\tPASS\t."),  # a VCF's columns
])
def test_a_header_in_another_order_is_honoured(tmp_path, header, row):
    [variant] = read_variants(_table(tmp_path, f"{header}\n{row}\n"))
    assert (variant.contig, variant.position, variant.ref, variant.alt) == ("chr1", 5, "A", "G")
    assert variant.id == ("rs1" if "ID" in header else ".")


def test_blank_lines_comments_and_crlf_anywhere(tmp_path):
    text = ("\r\n \t \r\n# written by a script, for chr1\r\n##source=lab\r\n"
            "chrom\tpos\tref\talt\r\n\r\nchr1\t5\tA\tG\r\n   \r\n\t\r\n# a comment between variants\r\n"
            "  # an indented one\r\nchr1\t6\tC\tT\r\n\r\n\r\n")
    assert read_variants(_table(tmp_path, text)) == SNV


def test_a_header_after_comments_and_blank_lines_is_still_the_header(tmp_path):
    assert read_variants(_table(tmp_path, "# variants\n\npos chrom alt ref\n5 chr1 G A\n6 chr1 T C\n")) == SNV


def test_prose_above_the_table_is_a_comment_not_a_header(tmp_path):
    """The comment names all four columns, in another order; its punctuation says it is prose."""
    text = "# ref and alt are alleles, contig the FASTA ID, position 1-based\nchr1 5 A G\nchr1 6 C T\n"
    assert read_variants(_table(tmp_path, text)) == SNV


def test_a_contig_called_chrom_is_data_when_its_position_is_a_number(tmp_path):
    assert read_variants(_table(tmp_path, "chrom\t5\tA\tG\n")) == [Variant("chrom", 5, "A", "G")]


def test_a_header_line_after_the_first_variant_is_a_comment(tmp_path):
    """Order is set before the variants: a ``#`` line among them cannot reorder what follows."""
    assert read_variants(_table(tmp_path, "chr1 5 A G\n#pos chrom alt ref\nchr1 6 C T\n")) == SNV


@pytest.mark.parametrize("text, line, match", [
    ("chrom pos ref alt\n\n# note\nchr1 5 A G\nchr1 x A G\n", 5, "position must be a 1-based integer, got 'x'"),
    ("#chrom\tpos\tref\talt\r\nchr1\t5\tA\r\n", 2, "expected contig, position, ref, alt; got 'chr1\\t5\\tA'"),
    ("\n\nchr1 5 A N\n", 3, "ref/alt must be A/C/G/T"),
    ("pos chrom alt ref\n5 chr1 G\n", 2, "expected position, contig, alt, ref in 4 columns, as the header on line 1"),
    ("chromosome position reference alternative\nchr1 5 A G\n", 1,
     "the header names no contig, ref, alt column; name the columns contig (or chrom), position (or pos)"),
    ("chrom pos ref alt\nchr1 5 A G\nchrom pos ref alt\n", 3, "position must be a 1-based integer, got 'pos'"),
])
def test_malformed_rows_are_refused_with_file_and_line(tmp_path, text, line, match):
    table = _table(tmp_path, text)
    with pytest.raises(GenomeInputError) as info:
        read_variants(table)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{table}: line {line}: ") and match in message, message


def test_score_variants_reads_a_hand_written_table_and_refuses_a_bad_row_in_one_line(tiny_config, write_fasta, tmp_path,
                                                                                    capsys):
    torch.manual_seed(0)
    cfg = tiny_config()
    ckpt = save_checkpoint(tmp_path / "tiny.ckpt", MoETransformer(cfg), cfg)
    seq = random_dna(300, seed=5)
    fasta = write_fasta({"chr": seq})
    alt = next(b for b in "ACGT" if b != seq[99])
    table = _table(tmp_path, "# from a spreadsheet\r\n\r\nPOS\tCHROM\tREF\tALT\r\n"
                             f"100\tchr\t{seq[99]}\t{alt}\r\n\t\r\n")
    out = tmp_path / "o.tsv"
    common = ["score-variants", str(ckpt), str(fasta), "--variants", str(table), "--out", str(out), "--window", "64"]
    assert cli_main(common) == 0
    assert [line.split("\t")[:5] for line in out.read_text().splitlines()[1:]] == [["chr", "100", ".", seq[99], alt]]
    capsys.readouterr()
    table.write_bytes(table.read_bytes() + b"chr\t101\tA\tC\r\n")  # columns in the default order, not the header's
    out.unlink()
    assert cli_main(common) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"biomoe: error: {table}: line 6: position must be a 1-based integer, got 'chr'", err
    assert not out.exists()
