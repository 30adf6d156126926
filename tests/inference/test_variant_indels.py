"""score-variants scores indels: the window with the ALT allele against the window with the REF
allele, same flanks, each summed over its own bases, from a table and from a VCF alike."""

from __future__ import annotations

import pytest

from biomoe.cli.main import main as cli_main
from biomoe.data.sources.genome import Genome
from biomoe.inference import score_variants as score_module
from biomoe.inference.load import load_model
from biomoe.inference.score_variants import read_variants, score_variants
from biomoe.inference.scoring import sequence_log_likelihood
from conftest import error_line, random_dna

SEQ = random_dna(400, seed=13)
SHORT = random_dna(24, seed=14)  # a contig shorter than the window: its windows share packed rows
WINDOW = 64
VCF_HEADER = ("##fileformat=VCFv4.2\n##contig=<ID=chr1,length=400>\n##contig=<ID=short,length=24>\n"
              "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n")


def _indels() -> list[tuple[str, int, str, str, str]]:
    """(contig, 1-based position, ref, alt, id): an insertion and a deletion on a long contig, and
    one of each on a contig shorter than the window."""
    return [("chr1", 200, SEQ[199], SEQ[199] + "TTG", "ins"),
            ("chr1", 300, SEQ[299:303], SEQ[299], "del"),
            ("short", 10, SHORT[9], SHORT[9] + "CA", "short_ins"),
            ("short", 15, SHORT[14:16], SHORT[14], "short_del")]


def _direct_llr(model, contig: str, position: int, ref: str, alt: str) -> tuple[int, float]:
    """(window start, llr) computed here: the ref window centred on the ref allele, the alt window
    the same flanks around the alt allele, each scored alone."""
    seq = SEQ if contig == "chr1" else SHORT
    size = min(WINDOW, len(seq))
    begin = position - 1
    start = min(max(begin + len(ref) // 2 - size // 2, 0), len(seq) - size)
    ref_window = seq[start:start + size]
    alt_window = seq[start:begin] + alt + seq[begin + len(ref):start + size]
    assert len(alt_window) == size + len(alt) - len(ref)
    ref_ll, alt_ll = sequence_log_likelihood(model, [ref_window, alt_window])
    return start, float(alt_ll.sum() - ref_ll.sum())


def _check_rows(tiny_checkpoint, out) -> None:
    model = load_model(tiny_checkpoint)
    rows = [line.split("\t") for line in out.read_text().splitlines()[1:]]
    assert [(r[0], int(r[1]), r[2], r[3], r[4]) for r in rows] == [(c, p, i, r, a) for c, p, r, a, i in _indels()]
    for row, (contig, position, ref, alt, _) in zip(rows, _indels()):
        start, llr = _direct_llr(model, contig, position, ref, alt)
        assert int(row[5]) == start
        assert float(row[8]) == pytest.approx(llr, abs=2e-4)
        assert float(row[8]) == pytest.approx(float(row[7]) - float(row[6]), abs=2e-6)
        assert abs(llr) > 1e-3


def test_insertions_and_deletions_from_a_table_score_as_their_two_windows(tiny_checkpoint, write_fasta, tmp_path,
                                                                          capsys):
    fasta = write_fasta({"chr1": SEQ, "short": SHORT})
    table = tmp_path / "indels.tsv"
    table.write_text("contig\tposition\tref\talt\tid\n"
                     + "".join(f"{c}\t{p}\t{r}\t{a}\t{i}\n" for c, p, r, a, i in _indels()))
    out = tmp_path / "effects.tsv"
    assert cli_main(["score-variants", str(tiny_checkpoint), str(fasta), "--variants", str(table), "--out", str(out),
                     "--window", str(WINDOW), "--device", "cpu", "--no-progress"]) == 0
    capsys.readouterr()
    _check_rows(tiny_checkpoint, out)
    assert not (tmp_path / "effects.skipped.tsv").exists()


def test_insertions_and_deletions_from_a_vcf_score_as_their_two_windows(tiny_checkpoint, write_fasta, tmp_path, capsys):
    pytest.importorskip("pysam")
    fasta = write_fasta({"chr1": SEQ, "short": SHORT})
    vcf = tmp_path / "indels.vcf"
    vcf.write_text(VCF_HEADER + "".join(f"{c}\t{p}\t{i}\t{r}\t{a}\t.\tPASS\t.\n" for c, p, r, a, i in _indels()))
    out = tmp_path / "effects.tsv"
    assert cli_main(["score-variants", str(tiny_checkpoint), str(fasta), "--variants", str(vcf), "--out", str(out),
                     "--window", str(WINDOW), "--device", "cpu", "--no-progress"]) == 0
    assert "skipped" not in capsys.readouterr().err
    _check_rows(tiny_checkpoint, out)


def test_windows_of_different_lengths_share_batches_and_a_shared_ref_window_is_scored_once(tiny_checkpoint, write_fasta,
                                                                                          tmp_path, monkeypatch):
    """One site with a substitution, an insertion and a deletion of the same ref allele (a table's
    rows): one ref window and three alt windows of three lengths are scored, and each allele's llr
    is that of its windows scored alone, whether the windows share a batch (padded, or packed as
    documents on the short contig) or each has a batch of its own."""
    genome = Genome(write_fasta({"chr1": SEQ, "short": SHORT}))
    model = load_model(tiny_checkpoint)
    ref = SEQ[149:151]
    snv = ("A" if ref[0] != "A" else "C") + ref[1]
    table = tmp_path / "site.tsv"
    table.write_text("".join(f"chr1\t150\t{ref}\t{alt}\n" for alt in (snv, ref[0], ref + "GATC"))
                     + "".join(f"{c}\t{p}\t{r}\t{a}\n" for c, p, r, a, _ in _indels() if c == "short"))
    variants = read_variants(table)
    scored: list[int] = []
    run = score_module.run_log_likelihood

    def counting(model, windows, *args, **kwargs):
        def seen():
            for window in windows:
                scored.append(window.ids.size)
                yield window
        return run(model, seen(), *args, **kwargs)

    continued: list[int] = []
    substitutions = score_module.score_substitutions

    def counting_substitutions(model, items, *args, **kwargs):
        continued.extend(item.ref_ids.size for item in items)
        return substitutions(model, items, *args, **kwargs)

    monkeypatch.setattr(score_module, "run_log_likelihood", counting)
    monkeypatch.setattr(score_module, "score_substitutions", counting_substitutions)
    together = score_variants(model, genome, variants, window=WINDOW)
    # one ref window for the three alleles: scored with the substitution, whose alt continues it;
    # the insertion and deletion reuse its score and run their own alt windows only
    assert continued == [WINDOW] and sorted(scored[:2]) == [WINDOW - 1, WINDOW + 4]
    alone = score_variants(model, genome, variants, window=WINDOW, batch_tokens=1)  # one window per batch
    for row, single, variant in zip(together, alone, variants):
        seq = SEQ if variant.contig == "chr1" else SHORT
        start = row["window_start"]
        size = min(WINDOW, len(seq))
        begin = variant.position - 1
        ref_ll, alt_ll = sequence_log_likelihood(model, [seq[start:start + size],
                                                         seq[start:begin] + variant.alt
                                                         + seq[begin + len(variant.ref):start + size]])
        assert row["llr"] == pytest.approx(float(alt_ll.sum() - ref_ll.sum()), abs=2e-4)
        assert row["llr"] == pytest.approx(single["llr"], abs=2e-4)


@pytest.mark.parametrize("ref_len, alt_len, allele", [(80, 1, "ref allele"), (1, 70, "alt allele")])
def test_an_indel_longer_than_the_window_is_one_line_naming_it(tiny_checkpoint, write_fasta, tmp_path, capsys,
                                                              ref_len, alt_len, allele):
    fasta = write_fasta({"chr1": SEQ})
    ref = SEQ[99:99 + ref_len]
    alt = ref[0] + "A" * (alt_len - 1)
    table = tmp_path / "long.tsv"
    table.write_text(f"chr1\t100\t{ref}\t{alt}\n")
    out = tmp_path / "effects.tsv"
    assert cli_main(["score-variants", str(tiny_checkpoint), str(fasta), "--variants", str(table), "--out", str(out),
                     "--window", str(WINDOW), "--device", "cpu", "--no-progress"]) == 2
    err = capsys.readouterr().err
    line = error_line(err)
    assert len([x for x in err.splitlines() if x.strip()]) == 1
    assert f"{table}: variant chr1:100 {ref}>{alt}" in line and allele in line
    assert f"do not fit in the scoring window of {WINDOW} bases" in line and not out.exists()


def test_an_indel_written_with_a_dash_is_told_how_to_write_it(tmp_path):
    from biomoe.errors import GenomeInputError
    from biomoe.inference.score_variants import read_variants

    table = tmp_path / "dash.tsv"
    table.write_text("chr1\t100\tA\t-\n")
    with pytest.raises(GenomeInputError, match=r"line 1: ref/alt must be A/C/G/T, got A>- \(write an indel "
                                               r"VCF-style, with the base before it"):
        read_variants(table)


def test_a_window_centred_elsewhere_moves_only_as_far_as_it_must_to_hold_the_variant(write_fasta):
    from biomoe.inference.score_variants import Variant, check_variants

    seq = random_dna(500, seed=3)
    genome = Genome(write_fasta({"chr1": seq}))
    snvs = [Variant("chr1", p, seq[p - 1], "A" if seq[p - 1] != "A" else "C") for p in (199, 200, 201, 300, 5)]
    _, own, _ = check_variants(genome, snvs, 64)
    _, codon, _ = check_variants(genome, snvs, 64, centres=[200, 200, 200, 200, 200])
    assert [start for start, _, _ in own] == [198 - 32, 199 - 32, 200 - 32, 299 - 32, 0]
    # the codon's three SNVs share one window centred on its middle base; one far after it sits at
    # the window's last base, one far before it at the window's first
    assert [start for start, _, _ in codon] == [199 - 32] * 3 + [299 - 63, 4]
    for (start, ref_seq, alt_seq), variant in zip(codon, snvs):
        assert ref_seq == seq[start:start + 64] and len(alt_seq) == 64
        offset = variant.position - 1 - start
        assert ref_seq[offset] == variant.ref and alt_seq[offset] == variant.alt


def test_variants_sharing_a_window_read_it_once_and_still_have_their_alleles_checked(write_fasta):
    from biomoe.errors import GenomeInputError
    from biomoe.inference.score_variants import SkippableVariantError, Variant, check_variants, variant_windows

    seq = random_dna(500, seed=4)
    genome = Genome(write_fasta({"chr1": seq}))
    reads: list[tuple[int, int, int]] = []
    fetch = genome.fetch

    def counted(contig, start, end):
        reads.append((contig, start, end))
        return fetch(contig, start, end)

    genome.fetch = counted  # type: ignore[method-assign]
    other = {"A": "C", "C": "G", "G": "T", "T": "A"}
    codon = [Variant("chr1", p, seq[p - 1], other[seq[p - 1]]) for p in (199, 200, 201) for _ in range(3)]
    _, windows, _ = check_variants(genome, codon, 64, centres=[200] * len(codon))
    assert len(reads) == 1  # nine SNVs, one window
    assert windows == [variant_windows(genome, v, 64, "x", centre=200) for v in codon]
    # a wrong reference allele inside a window read before is still found, and named
    wrong = Variant("chr1", 200, other[seq[199]], seq[199])
    with pytest.raises(SkippableVariantError, match="reference allele .* does not match the genome"):
        check_variants(genome, [*codon, wrong], 64, centres=[200] * 10)
    kept, _, skipped = check_variants(genome, [*codon, wrong], 64, skip=True, centres=[200] * 10)
    assert kept == codon and skipped == [(wrong, f"reference mismatch (genome has {seq[199]})")]
    # an allele longer than the window: a mismatch is named first, then the window size
    long_ref = Variant("chr1", 100, seq[99:199], "A")
    with pytest.raises(GenomeInputError, match="ref allele of 100 bases do not fit in the scoring window of 64"):
        check_variants(genome, [long_ref], 64)
    with pytest.raises(SkippableVariantError, match="does not match the genome"):
        check_variants(genome, [Variant("chr1", 100, "A" * 100, "A")], 64)
