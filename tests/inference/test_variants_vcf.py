"""score-variants reads VCF/BCF through pysam: substitutions and indels are scored as from a TSV table,
and alleles that are not sequence are listed with their reason."""

from __future__ import annotations

import sys

import pytest

from biomoe.inference.score_variants import Variant
from biomoe.inference.variant_vcf import read_vcf
from biomoe.cli.main import main as cli_main
from conftest import random_dna

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
        f"chr1\t150\t.\t{SEQ[149]}\t{SEQ[149]}A\t.\tPASS\t.",  # insertion: scored
        f"chr1\t170\t.\t{SEQ[169]}\t<DEL>\t.\tPASS\t.",  # symbolic: set aside
        f"chr1\t200\t.\t{mnv}\t{_other(mnv[0])}{_other(mnv[1])}\t.\tPASS\t.",  # 2-base substitution
    ]
    return HEADER + "\n".join(lines) + "\n"


def test_vcf_alleles_become_variants_and_others_are_set_aside_with_a_reason(tmp_path):
    vcf = tmp_path / "calls.vcf"
    vcf.write_text(_vcf_text())
    variants, skipped = read_vcf(vcf)
    assert [(v.position, v.alt, reason) for v, reason in skipped] == [(170, "<DEL>", "symbolic allele (<DEL>)")]
    assert [(v.position, v.ref) for v in variants] == [(50, SEQ[49]), (100, SEQ[99]), (100, SEQ[99]),
                                                        (150, SEQ[149]), (200, SEQ[199:201])]
    assert variants[1].alt != variants[2].alt and all(isinstance(v, Variant) for v in variants)


@pytest.mark.parametrize("compressed", [False, True])
def test_vcf_scores_equal_the_same_variants_from_a_table(tiny_checkpoint, write_fasta, tmp_path, capsys, compressed):
    fasta = write_fasta({"chr1": SEQ})
    vcf = tmp_path / "calls.vcf"
    vcf.write_text(_vcf_text())
    if compressed:
        pysam.tabix_compress(str(vcf), str(tmp_path / "calls.vcf.gz"))
        vcf = tmp_path / "calls.vcf.gz"
    variants, _ = read_vcf(vcf)
    table = tmp_path / "same.tsv"
    table.write_text("contig\tposition\tref\talt\tid\n"
                     + "".join(f"{v.contig}\t{v.position}\t{v.ref}\t{v.alt}\t{v.id}\n" for v in variants))
    common = [str(tiny_checkpoint), str(fasta), "--window", "64"]
    assert cli_main(["score-variants", *common, "--variants", str(vcf), "--out", str(tmp_path / "v.tsv")]) == 0
    assert "skipped 1 ALT allele(s)" in capsys.readouterr().err
    assert cli_main(["score-variants", *common, "--variants", str(table), "--out", str(tmp_path / "t.tsv")]) == 0
    from_vcf = (tmp_path / "v.tsv").read_text().splitlines()
    assert len(from_vcf) == 1 + 5 and from_vcf == (tmp_path / "t.tsv").read_text().splitlines()
    assert [line.split("\t")[2] for line in from_vcf] == ["id", "rs1", ".", ".", ".", "."]  # the VCF ID carried


def test_vcf_problems_are_one_line(tiny_checkpoint, write_fasta, tmp_path, capfd, monkeypatch):
    fasta = write_fasta({"chr1": SEQ})
    bad = tmp_path / "bad.vcf"
    bad.write_text("this is not a VCF\n")
    only_symbolic = tmp_path / "symbolic.vcf"
    only_symbolic.write_text(HEADER + f"chr1\t150\t.\t{SEQ[149]}\t<INS>\t.\tPASS\t.\n")
    undeclared = tmp_path / "undeclared.vcf"  # htslib warns about a contig missing from the header
    undeclared.write_text(HEADER + "chr2\t5\t.\tA\tC\t.\tPASS\t.\n")
    cases = [(tmp_path / "missing.vcf", "no such file"), (bad, "cannot read as VCF/BCF"),
             (only_symbolic, "all 1 variants were skipped (1 symbolic allele"),
             (undeclared, "contig 'chr2' is not in the genome")]
    for path, message in cases:
        assert cli_main(["score-variants", str(tiny_checkpoint), str(fasta), "--variants", str(path),
                         "--out", str(tmp_path / "o.tsv")]) == 2
        err = capfd.readouterr().err.strip().splitlines()
        assert err[-1].startswith("biomoe: error:") and message in err[-1]
        assert all(line.startswith("biomoe: ") for line in err)  # no htslib chatter, no traceback
    monkeypatch.setitem(sys.modules, "pysam", None)  # as if the extra were not installed
    assert cli_main(["score-variants", str(tiny_checkpoint), str(fasta), "--variants", str(bad),
                     "--out", str(tmp_path / "o.tsv")]) == 2
    assert "pip install 'biomoe[vcf]'" in capfd.readouterr().err


INFO_HEADER = ('##INFO=<ID=AF,Number=A,Type=Float,Description="f">\n'
               '##INFO=<ID=AD,Number=R,Type=Integer,Description="d">\n'
               '##INFO=<ID=DB,Number=0,Type=Flag,Description="b">\n'
               '##INFO=<ID=GENE,Number=1,Type=String,Description="g">\n')


def test_vcf_id_and_info_fields_become_columns(tiny_checkpoint, write_fasta, tmp_path, capsys):
    """Per-ALT fields give each allele its own value; flags read true/false; absent fields stay empty."""
    fasta = write_fasta({"chr1": SEQ})
    a, b = _other(SEQ[99]), _other(SEQ[99], _other(SEQ[99]))
    header = HEADER.replace("#CHROM", INFO_HEADER + "#CHROM")
    vcf = tmp_path / "calls.vcf"
    vcf.write_text(header + f"chr1\t50\trs1\t{SEQ[49]}\t{_other(SEQ[49])}\t.\tPASS\tAF=0.25;DB;GENE=lacZ\n"
                            f"chr1\t100\t.\t{SEQ[99]}\t{a},{b}\t.\tPASS\tAF=0.1,0.5;AD=7,2,1\n")
    variants, _ = read_vcf(vcf, ["AF", "AD", "DB", "GENE"])
    assert [v.id for v in variants] == ["rs1", ".", "."]
    assert [dict(v.info) for v in variants] == [
        {"AF": "0.25", "AD": "", "DB": "true", "GENE": "lacZ"},
        {"AF": "0.1", "AD": "7,2", "DB": "false", "GENE": ""},
        {"AF": "0.5", "AD": "7,1", "DB": "false", "GENE": ""}]
    out = tmp_path / "o.tsv"
    assert cli_main(["score-variants", str(tiny_checkpoint), str(fasta), "--variants", str(vcf), "--out", str(out),
                     "--window", "64", "--info", "AF,DB", "--info", "GENE"]) == 0
    lines = [line.split("\t") for line in out.read_text().splitlines()]
    assert lines[0] == ["contig", "position", "id", "ref", "alt", "window_start", "logp_ref", "logp_alt", "llr",
                        "AF", "DB", "GENE"]
    assert [row[:3] + row[9:] for row in lines[1:]] == [["chr1", "50", "rs1", "0.25", "true", "lacZ"],
                                                         ["chr1", "100", ".", "0.1", "false", ""],
                                                         ["chr1", "100", ".", "0.5", "false", ""]]
    capsys.readouterr()
    assert cli_main(["score-variants", str(tiny_checkpoint), str(fasta), "--variants", str(vcf), "--out", str(out),
                     "--info", "NOPE"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "NOPE not declared" in err


def test_table_id_column_is_read_by_header_and_four_columns_still_read(tmp_path):
    from biomoe.inference.score_variants import read_variants

    table = tmp_path / "v.tsv"
    table.write_text("contig\tposition\tref\talt\tid\nchr1\t5\tA\tG\tv1\nchr1\t6\tC\tT\t\n")
    assert [(v.position, v.id) for v in read_variants(table)] == [(5, "v1"), (6, ".")]
    table.write_text("chr1\t5\tA\tG\tnot-an-id\n")  # no header naming it: the 5th column is not read
    assert read_variants(table) == [Variant("chr1", 5, "A", "G")]
    table.write_text("contig\tposition\tid\tref\talt\twindow_start\nchr1\t5\tv1\tA\tG\t0\n")  # the output's order
    assert read_variants(table) == [Variant("chr1", 5, "A", "G", "v1")]


def test_skip_mismatched_lists_the_skipped_and_removes_a_stale_list(tiny_checkpoint, write_fasta, tmp_path, capsys):
    gi = "gi|208433976|ref|NC_011333.1|"
    fasta = write_fasta({gi: SEQ})
    good = f"NC_011333\t50\t{SEQ[49]}\t{_other(SEQ[49])}\tok1"  # the accession names the gi| contig
    wrong = f"{gi}\t100\t{_other(SEQ[99])}\tA\tbad1"
    table = tmp_path / "v.tsv"
    table.write_text("contig\tposition\tref\talt\tid\n" + "\n".join(
        [good, wrong, "chrX\t5\tA\tC\tbad2", f"NC_011333.1\t400\t{SEQ[399]}\t{_other(SEQ[399])}\tok2",
         "NC_011333.1\t401\tA\tC\tbad3"]) + "\n")
    out = tmp_path / "effects.tsv"
    listed = tmp_path / "effects.skipped.tsv"
    common = ["score-variants", str(tiny_checkpoint), str(fasta), "--variants", str(table), "--out", str(out),
              "--window", "64"]
    assert cli_main(common) == 2  # without the flag the first mismatch stops, as before
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "does not match" in err and not out.exists() and not listed.exists()
    assert cli_main(common + ["--skip-mismatched"]) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "skipped 3 variant(s)" in line]
    assert len(notes) == 1 and str(listed) in notes[0]
    rows = [line.split("\t") for line in out.read_text().splitlines()[1:]]
    assert [(r[0], r[1], r[2]) for r in rows] == [("NC_011333", "50", "ok1"), ("NC_011333.1", "400", "ok2")]
    skipped = [line.split("\t") for line in listed.read_text().splitlines()]
    assert skipped[0] == ["contig", "position", "id", "ref", "alt", "reason"]
    assert [(r[2], r[5].split(" (")[0]) for r in skipped[1:]] == [
        ("bad1", "reference mismatch"), ("bad2", "contig not in the genome"), ("bad3", "beyond contig end")]
    from biomoe.inference.score_variants import read_variants
    assert [v.id for v in read_variants(listed)] == ["bad1", "bad2", "bad3"]  # the list reads back as a table
    table.write_text("contig\tposition\tref\talt\tid\n" + good + "\n")
    assert cli_main(common + ["--skip-mismatched"]) == 0
    assert not listed.exists() and len(out.read_text().splitlines()) == 2  # no stale list beside new results
    # no temporary files left
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp") or ".tmp." in p.name]


def test_ambiguous_contig_in_a_table_is_one_line_even_when_skipping(tiny_checkpoint, write_fasta, tmp_path, capsys):
    fasta = write_fasta({"gi|1|ref|NC_5.1|": SEQ, "gi|2|ref|NC_5.2|": SEQ})
    table = tmp_path / "v.tsv"
    table.write_text(f"NC_5\t50\t{SEQ[49]}\t{_other(SEQ[49])}\n")
    assert cli_main(["score-variants", str(tiny_checkpoint), str(fasta), "--variants", str(table), "--out",
                     str(tmp_path / "o.tsv"), "--skip-mismatched"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "ambiguous" in err and "gi|1|ref|NC_5.1|, gi|2|ref|NC_5.2|" in err


def test_a_plain_gzip_vcf_and_a_position_zero_are_one_line_each(tiny_checkpoint, write_fasta, tmp_path, capsys):
    import gzip

    from conftest import error_line

    fasta = write_fasta({"chr1": SEQ})
    plain = tmp_path / "calls.vcf.gz"
    plain.write_bytes(gzip.compress(_vcf_text().encode()))  # gzip, not bgzip
    zero = tmp_path / "zero.vcf"
    zero.write_text(HEADER + f"chr1\t0\t.\t{SEQ[0]}\t{_other(SEQ[0])}\t.\tPASS\t.\n")
    for variants, problem in ((plain, "not bgzipped"), (zero, "position must be >= 1")):
        code = cli_main(["score-variants", str(tiny_checkpoint), str(fasta), "--variants", str(variants),
                         "--out", str(tmp_path / "out.tsv"), "--device", "cpu", "--no-progress"])
        assert code == 2
        line = error_line(capsys.readouterr().err)
        assert str(variants) in line and problem in line
    assert not (tmp_path / "out.tsv").exists()


def test_each_allele_of_a_multi_allelic_record_is_its_own_row(tiny_checkpoint, write_fasta, tmp_path, capsys):
    """``A  C,T`` gives one row per ALT, each naming its own allele and scored as that allele alone;
    a deletion, a substitution and an insertion in one record share the ref window and are each
    scored as if alone."""
    fasta = write_fasta({"chr1": SEQ})
    ref = SEQ[99]
    first, second = [b for b in "ACGT" if b != ref][:2]
    pair = SEQ[119:121]
    mnv = _other(pair[0]) + _other(pair[1])
    vcf = tmp_path / "multi.vcf"
    vcf.write_text(HEADER + f"chr1\t100\tm1\t{ref}\t{first},{second}\t.\tPASS\t.\n"
                   f"chr1\t120\tm2\t{pair}\t{pair[0]},{mnv},{pair}A\t.\tPASS\t.\n")  # deletion, MNV, insertion
    out = tmp_path / "multi.tsv"
    common = [str(tiny_checkpoint), str(fasta), "--window", "64", "--device", "cpu", "--no-progress"]
    assert cli_main(["score-variants", *common, "--variants", str(vcf), "--out", str(out)]) == 0
    assert "skipped" not in capsys.readouterr().err
    rows = [line.split("\t") for line in out.read_text().splitlines()[1:]]
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [("100", "m1", ref, first), ("100", "m1", ref, second),
                                                         ("120", "m2", pair, pair[0]), ("120", "m2", pair, mnv),
                                                         ("120", "m2", pair, pair + "A")]
    for row in rows:  # each allele scored as if it were the only one
        single = tmp_path / f"one_{row[4]}.tsv"
        single.write_text(f"chr1\t{row[1]}\t{row[3]}\t{row[4]}\n")
        alone = tmp_path / f"alone_{row[4]}.tsv"
        assert cli_main(["score-variants", *common, "--variants", str(single), "--out", str(alone)]) == 0
        single_row = alone.read_text().splitlines()[1].split("\t")
        assert single_row[5] == row[5]  # the same window
        # the same scores; alone, its alt window shares a forward pass with fewer rows, and fp32
        # matrix products of other shapes round differently in the last place (~1e-7 of each base's
        # log-likelihood, summed over the window's 64 bases)
        assert [float(v) for v in single_row[6:9]] == pytest.approx([float(v) for v in row[6:9]], abs=1e-4)
        assert single_row[9:] == row[9:]
    capsys.readouterr()


def test_the_skipped_list_exists_when_every_variant_is_skipped(tiny_checkpoint, write_fasta, tmp_path, capsys):
    from conftest import error_line

    fasta = write_fasta({"chr1": SEQ})
    table = tmp_path / "v.tsv"
    table.write_text("chrX\t5\tA\tC\nchr1\t401\tA\tC\n")
    out = tmp_path / "effects.tsv"
    assert cli_main(["score-variants", str(tiny_checkpoint), str(fasta), "--variants", str(table), "--out", str(out),
                     "--skip-mismatched", "--window", "64"]) == 2
    line = error_line(capsys.readouterr().err)
    listed = tmp_path / "effects.skipped.tsv"
    assert "all 2 variants were skipped" in line and str(listed) in line and not out.exists()
    rows = [r.split("\t") for r in listed.read_text().splitlines()]
    assert rows[0][-1] == "reason" and [r[0] for r in rows[1:]] == ["chrX", "chr1"]


def test_vcf_alleles_that_are_not_sequence_are_listed_with_their_reason(tiny_checkpoint, write_fasta, tmp_path, capsys):
    """Symbolic alleles, ``*``, breakends, N or IUPAC codes and records without ALT are set aside
    flag or not, listed in OUT.skipped.tsv with the reason, and the stderr note says how many and
    where; a later run that sets nothing aside removes the list."""
    fasta = write_fasta({"chr1": SEQ})
    snv = f"chr1\t50\tok\t{SEQ[49]}\t{_other(SEQ[49])}\t.\tPASS\t."
    vcf = tmp_path / "calls.vcf"
    vcf.write_text(HEADER + "\n".join([
        snv,
        f"chr1\t60\tsv1\t{SEQ[59]}\t<DEL>\t.\tPASS\t.",
        f"chr1\t70\tsp1\t{SEQ[69]}\t*,{_other(SEQ[69])}\t.\tPASS\t.",  # '*' set aside, the SNV scored
        f"chr1\t80\tn1\t{SEQ[79]}\t{SEQ[79]}N\t.\tPASS\t.",
        f"chr1\t90\tr1\t{SEQ[89]}\tR\t.\tPASS\t.",
        f"chr1\t95\tbnd\t{SEQ[94]}\t{SEQ[94]}]chr1:300]\t.\tPASS\t.",
        f"chr1\t99\tnoalt\t{SEQ[98]}\t.\t.\tPASS\t."]) + "\n")
    out = tmp_path / "effects.tsv"
    listed = tmp_path / "effects.skipped.tsv"
    common = ["score-variants", str(tiny_checkpoint), str(fasta), "--variants", str(vcf), "--out", str(out),
              "--window", "64", "--device", "cpu", "--no-progress"]
    assert cli_main(common) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "skipped" in line]
    assert len(notes) == 1 and "skipped 6 ALT allele(s)" in notes[0] and str(listed) in notes[0]
    assert "1 symbolic allele" in notes[0] and "2 not A/C/G/T" in notes[0]
    assert [line.split("\t")[2] for line in out.read_text().splitlines()[1:]] == ["ok", "sp1"]
    rows = [line.split("\t") for line in listed.read_text().splitlines()]
    assert rows[0] == ["contig", "position", "id", "ref", "alt", "reason"]
    assert [(r[2], r[4], r[5].split(" (")[0]) for r in rows[1:]] == [
        ("sv1", "<DEL>", "symbolic allele"), ("sp1", "*", "spanning deletion"),
        ("n1", SEQ[79] + "N", "not A/C/G/T"), ("r1", "R", "not A/C/G/T"),
        ("bnd", f"{SEQ[94]}]chr1:300]", "breakend"), ("noalt", ".", "no ALT allele")]
    assert rows[1][5] == "symbolic allele (<DEL>)" and rows[4][5] == "not A/C/G/T (ALT R has R)"
    vcf.write_text(HEADER + snv + "\n")
    assert cli_main(common) == 0
    assert not listed.exists() and "skipped" not in capsys.readouterr().err
