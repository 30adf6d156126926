"""What score-variants and export-hf leave behind: a VCF named .vcf is a VCF, and a failed export
leaves no empty folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from biomoe.cli.main import main
from conftest import error_line, random_dna

SEQ = random_dna(400, seed=5)


def _other(base: str) -> str:
    return next(b for b in "ACGT" if b != base)


def _calls(tmp_path: Path) -> Path:
    table = tmp_path / "calls.tsv"
    rows = [("chr1", 120, SEQ[119], _other(SEQ[119]), "rs2"), ("chr1", 60, SEQ[59], _other(SEQ[59]), "rs1"),
            ("chr1", 200, SEQ[199], SEQ[199] + "TT", "ins1")]
    table.write_text("contig\tposition\tref\talt\tid\n" + "".join("\t".join(map(str, r)) + "\n" for r in rows))
    return table


def test_score_variants_writes_a_vcf_for_a_vcf_name(tiny_checkpoint, write_fasta, tmp_path, capsys) -> None:
    fasta = write_fasta({"chr1": SEQ})
    common = [str(tiny_checkpoint), str(fasta), "--variants", str(_calls(tmp_path)), "--window", "64", "--no-progress"]
    assert main(["score-variants", *common, "--out", str(tmp_path / "effects.tsv")]) == 0
    assert main(["score-variants", *common, "--out", str(tmp_path / "effects.vcf")]) == 0
    capsys.readouterr()
    table = [line.split("\t") for line in (tmp_path / "effects.tsv").read_text().splitlines()]
    llr = {row[2]: float(row[8]) for row in table[1:]}
    text = (tmp_path / "effects.vcf").read_text()
    assert text.startswith("##fileformat=VCFv4.2\n")
    assert '##INFO=<ID=LLR,Number=A,Type=Float,Description="' in text and "##contig=<ID=chr1,length=400>" in text
    records = [line.split("\t") for line in text.splitlines() if not line.startswith("#")]
    assert [r[1] for r in records] == ["60", "120", "200"]  # by position
    for record in records:
        info = dict(field.split("=") for field in record[7].split(";"))
        assert float(info["LLR"]) == pytest.approx(llr[record[2]], abs=2e-6)
    pysam = pytest.importorskip("pysam")
    with pysam.VariantFile(str(tmp_path / "effects.vcf")) as vcf:
        read = [(r.id, r.info["LLR"][0], r.info["WINDOW_START"]) for r in vcf]
    assert [ident for ident, _, _ in read] == ["rs1", "rs2", "ins1"]
    assert all(llr[ident] == pytest.approx(value, abs=1e-5) for ident, value, _ in read)


@pytest.mark.parametrize("name", ["effects.vcf.gz", "effects.bcf"])
def test_score_variants_refuses_a_compressed_vcf_name_in_one_line(name, tiny_checkpoint, write_fasta, tmp_path,
                                                                   capsys) -> None:
    fasta = write_fasta({"chr1": SEQ})
    assert main(["score-variants", str(tiny_checkpoint), str(fasta), "--variants", str(_calls(tmp_path)),
                 "--out", str(tmp_path / name), "--no-progress"]) == 2
    line = error_line(capsys.readouterr().err)
    assert name in line and "plain VCF" in line
    assert not (tmp_path / name).exists()


def test_export_hf_of_a_missing_checkpoint_leaves_no_folder(tmp_path, capsys) -> None:
    pytest.importorskip("safetensors")
    assert main(["export-hf", str(tmp_path / "missing.ckpt"), str(tmp_path / "hf_x")]) == 2
    assert "not found" in error_line(capsys.readouterr().err)
    assert not (tmp_path / "hf_x").exists()
