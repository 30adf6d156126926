"""score-variants reads VCF/BCF through pysam: substitutions are scored as from a TSV table."""

from __future__ import annotations

import sys

import pytest
import torch

from biomoe.inference.score_variants import Variant, read_vcf
from biomoe.model.config import ModelConfig
from biomoe.model.transformer import MoETransformer
from biomoe.cli.main import main as cli_main
from conftest import random_dna, save_checkpoint

pysam = pytest.importorskip("pysam")

SEQ = random_dna(400, seed=11)
HEADER = "##fileformat=VCFv4.2\n##contig=<ID=chr1,length=400>\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n"


def _other(base: str, skip: str = "") -> str:
    return next(b for b in "ACGT" if b != base and b not in skip)


def _vcf_text() -> str:
    snv_alt = _other(SEQ[49])
    multi = (_other(SEQ[99]), _other(SEQ[99], _other(SEQ[99])))
    mnv = SEQ[199:201]
    lines = [
        f"chr1\t50\trs1\t{SEQ[49]}\t{snv_alt}\t.\tPASS\t.",
        f"chr1\t100\t.\t{SEQ[99]}\t{multi[0]},{multi[1]}\t.\tPASS\t.",
        f"chr1\t150\t.\t{SEQ[149]}\t{SEQ[149]}A\t.\tPASS\t.",  # insertion: skipped
        f"chr1\t170\t.\t{SEQ[169]}\t<DEL>\t.\tPASS\t.",  # symbolic: skipped
        f"chr1\t200\t.\t{mnv}\t{_other(mnv[0])}{_other(mnv[1])}\t.\tPASS\t.",  # 2-base substitution
    ]
    return HEADER + "\n".join(lines) + "\n"


@pytest.fixture
def ckpt(tmp_path):
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                      ffn_hidden_size=32, init_std=0.3)
    return save_checkpoint(tmp_path / "tiny.ckpt", MoETransformer(cfg), cfg)


def test_vcf_alleles_become_substitutions_and_others_are_counted(tmp_path):
    vcf = tmp_path / "calls.vcf"
    vcf.write_text(_vcf_text())
    variants, skipped = read_vcf(vcf)
    assert skipped == 2
    assert [(v.position, v.ref) for v in variants] == [(50, SEQ[49]), (100, SEQ[99]), (100, SEQ[99]),
                                                        (200, SEQ[199:201])]
    assert variants[1].alt != variants[2].alt and all(isinstance(v, Variant) for v in variants)


@pytest.mark.parametrize("compressed", [False, True])
def test_vcf_scores_equal_the_same_variants_from_a_table(ckpt, write_fasta, tmp_path, capsys, compressed):
    fasta = write_fasta({"chr1": SEQ})
    vcf = tmp_path / "calls.vcf"
    vcf.write_text(_vcf_text())
    if compressed:
        pysam.tabix_compress(str(vcf), str(tmp_path / "calls.vcf.gz"))
        vcf = tmp_path / "calls.vcf.gz"
    variants, _ = read_vcf(vcf)
    table = tmp_path / "same.tsv"
    table.write_text("".join(f"{v.contig}\t{v.position}\t{v.ref}\t{v.alt}\n" for v in variants))
    common = [str(ckpt), str(fasta), "--window", "64"]
    assert cli_main(["score-variants", *common, "--variants", str(vcf), "--out", str(tmp_path / "v.tsv")]) == 0
    assert "skipped 2 ALT allele(s)" in capsys.readouterr().err
    assert cli_main(["score-variants", *common, "--variants", str(table), "--out", str(tmp_path / "t.tsv")]) == 0
    from_vcf = (tmp_path / "v.tsv").read_text().splitlines()
    assert len(from_vcf) == 1 + 4 and from_vcf == (tmp_path / "t.tsv").read_text().splitlines()


def test_vcf_problems_are_one_line(ckpt, write_fasta, tmp_path, capfd, monkeypatch):
    fasta = write_fasta({"chr1": SEQ})
    bad = tmp_path / "bad.vcf"
    bad.write_text("this is not a VCF\n")
    only_indels = tmp_path / "indels.vcf"
    only_indels.write_text(HEADER + f"chr1\t150\t.\t{SEQ[149]}\t{SEQ[149]}A\t.\tPASS\t.\n")
    undeclared = tmp_path / "undeclared.vcf"  # htslib warns about a contig missing from the header
    undeclared.write_text(HEADER + "chr2\t5\t.\tA\tC\t.\tPASS\t.\n")
    cases = [(tmp_path / "missing.vcf", "no such file"), (bad, "cannot read as VCF/BCF"),
             (only_indels, "no substitutions to score"), (undeclared, "contig 'chr2' is not in the genome")]
    for path, message in cases:
        assert cli_main(["score-variants", str(ckpt), str(fasta), "--variants", str(path),
                         "--out", str(tmp_path / "o.tsv")]) == 2
        err = capfd.readouterr().err.strip().splitlines()
        assert err[-1].startswith("biomoe: error:") and message in err[-1]
        assert all(line.startswith("biomoe: ") for line in err)  # no htslib chatter, no traceback
    monkeypatch.setitem(sys.modules, "pysam", None)  # as if the extra were not installed
    assert cli_main(["score-variants", str(ckpt), str(fasta), "--variants", str(bad),
                     "--out", str(tmp_path / "o.tsv")]) == 2
    assert "pip install 'biomoe[vcf]'" in capfd.readouterr().err
