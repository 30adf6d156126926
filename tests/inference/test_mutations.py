"""The zero-shot mutation benchmark: genes, SNV classes on both strands, the Markov LLR, the AUROC
and the command's outputs."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
import torch

from biomoe.cli.main import main as cli_main
from biomoe.data.tokenizer import NucleotideTokenizer
from biomoe.genomics.genes import Gene, call_genes, codon_position, coding_mask, coding_strand
from biomoe.genomics.markov import MarkovModel
from biomoe.inference import mutations as engine
from biomoe.model.config import ModelConfig
from biomoe.model.transformer import MoETransformer
from conftest import ROOT, error_line, random_dna, save_checkpoint

LAMBDA = ROOT / "data" / "lambda_virus.fa.gz"
FORWARD = "ATGTGGAAATAA"  # Met Trp Lys stop
REVERSE = engine.reverse_complement(FORWARD)


def _lambda_sequence() -> str:
    with gzip.open(LAMBDA, "rt") as handle:
        return "".join(line.strip() for line in handle if not line.startswith(">")).upper()


def _snvs(sequence: str, strand: int, table: int = 11) -> dict[tuple[int, str], engine.MutationSNV]:
    gene = Gene("c", 0, len(sequence), strand)
    snvs = engine.enumerate_snvs({"c": sequence}, [(gene, 1)], engine.codon_table(table))
    return {(s.codon_position, s.alt if strand > 0 else engine.reverse_complement(s.alt)): s for s in snvs}


def test_tgg_to_tga_is_a_stop_gain_and_third_positions_of_lysine_split_by_purine():
    code = engine.codon_table(11)
    assert engine.classify_snv("TGG", 2, "A", code) == "stop_gain"
    assert engine.classify_snv("TGG", 1, "A", code) == "stop_gain"  # TAG
    assert engine.classify_snv("AAA", 2, "G", code) == "synonymous"  # AAG, still Lys
    assert engine.classify_snv("AAA", 2, "C", code) == "missense"  # AAC, Asn
    assert engine.classify_snv("CTG", 0, "T", code) == "synonymous"  # TTG, Leu at a first position


@pytest.mark.parametrize("strand", [1, -1])
def test_a_codon_is_read_and_mutated_on_its_genes_own_strand(strand):
    sequence = FORWARD if strand > 0 else REVERSE
    snvs = _snvs(sequence, strand)
    assert len(snvs) == 9 and {s.codon for s in snvs.values()} == {"TGG"}
    stop = snvs[(3, "A")]
    assert stop.klass == "stop_gain"
    # the forward-strand coordinates and bases, as a VCF would write them
    assert stop.position == (6 if strand > 0 else 7)
    assert (stop.ref, stop.alt) == (("G", "A") if strand > 0 else ("C", "T"))
    assert sequence[stop.position - 1] == stop.ref
    assert sum(s.klass == "stop_gain" for s in snvs.values()) == 2  # TAG, TGA; TGG has no synonym
    assert all(s.klass == "missense" for k, s in snvs.items() if k not in ((2, "A"), (3, "A")))
    middle = {s.codon_middle for s in snvs.values()}  # the codon's one shared window is centred here
    assert middle == {5 if strand > 0 else 8}
    assert sequence[middle.pop() - 1] == ("G" if strand > 0 else "C")  # tGg, read on its own strand


def test_table_4_reads_tga_as_tryptophan_and_table_1_classes_as_table_11():
    assert _snvs(FORWARD, 1, table=4)[(3, "A")].klass == "synonymous"
    assert ({k: s.klass for k, s in _snvs(FORWARD, 1, table=1).items()}
            == {k: s.klass for k, s in _snvs(FORWARD, 1, table=11).items()})


def test_an_unknown_table_is_one_line(tiny_checkpoint, tmp_path, capsys):
    assert cli_main(["mutations", "--ckpt_path", str(tiny_checkpoint), str(LAMBDA), "--out", str(tmp_path / "o"),
                     "--table", "99"]) != 0
    assert "--table 99" in error_line(capsys.readouterr().err)


def test_a_genome_without_genes_is_one_line(tiny_checkpoint, write_fasta, tmp_path, capsys):
    fasta = write_fasta({"polyA": "A" * 3000})
    assert cli_main(["mutations", "--ckpt_path", str(tiny_checkpoint), str(fasta), "--out", str(tmp_path / "o")]) != 0
    assert "no complete protein-coding genes" in error_line(capsys.readouterr().err)


def test_lambda_genes_are_called_deterministically_with_consistent_per_base_views():
    sequence = _lambda_sequence()
    genes = call_genes(sequence, contig="lambda")
    assert len(genes) >= 40 and genes == call_genes(sequence, contig="lambda")
    assert {g.strand for g in genes} == {1, -1}
    assert sum(sequence[g.start:g.end][:3] in ("ATG", "GTG", "TTG") for g in genes if g.strand > 0 and
               not g.partial) >= 0.9 * sum(g.strand > 0 and not g.partial for g in genes)
    length = len(sequence)
    mask, strand, phase = coding_mask(genes, length), coding_strand(genes, length), codon_position(genes, length)
    assert mask.mean() > 0.7  # phage genomes are densely coding
    assert ((strand != 0) == mask).all() and ((phase != 0) == mask).all()
    plus = next(g for g in genes if g.strand > 0)
    minus = next(g for g in genes if g.strand < 0)
    assert list(codon_position([plus], length)[plus.start:plus.start + 3]) == [1, 2, 3]
    assert list(codon_position([minus], length)[minus.end - 3:minus.end]) == [3, 2, 1]
    assert call_genes(sequence[:15000], contig="short")  # meta mode below Prodigal's training minimum


def test_codon_samples_are_seeded_and_skip_starts_stops_and_ambiguous_codons():
    sequence = _lambda_sequence()
    code = engine.codon_table(11)
    genes = call_genes(sequence, contig="c")
    first = engine.sample_codons({"c": sequence}, genes, 300, seed=1, code=code)
    assert first == engine.sample_codons({"c": sequence}, genes, 300, seed=1, code=code)
    assert first != engine.sample_codons({"c": sequence}, genes, 300, seed=2, code=code)
    assert len(set(first)) == 300
    assert all(0 < index < gene.length // 3 - 1 and not gene.partial for gene, index in first)
    gene = next(g for g in genes if not g.partial and g.strand > 0)
    masked = sequence[:gene.start + 3] + "NNN" + sequence[gene.start + 6:]
    assert (gene, 1) not in engine.sample_codons({"c": masked}, [gene], 10_000, seed=0, code=code)


def test_eligible_codons_are_the_sense_codons_read_one_by_one_on_each_strand():
    """The array form of codon eligibility against reading every codon as a string (both strands,
    soft-masked and ambiguous bases, a table with other stops)."""
    rng = np.random.default_rng(5)
    sequence = "".join(rng.choice(list("ACGTACGTACGTacgtN"), 3_000))
    genes = [Gene("c", start, start + 3 * codons, strand)
             for start, codons, strand in [(0, 40, 1), (5, 300, -1), (1_000, 500, 1), (2_997, 1, 1), (13, 2, -1)]]
    for table in (11, 4):
        code = engine.codon_table(table)
        tokenizer = NucleotideTokenizer()
        stops, ids = engine._stop_mask(code, tokenizer), tokenizer.encode(sequence)
        for gene in genes:
            want = [index for index in range(1, gene.length // 3 - 1)
                    if not set(codon := engine._codon_at(sequence, gene, index)[0]) - set("ACGT")
                    and codon not in code.stops]
            assert engine._eligible_codons(ids, gene, stops, tokenizer).tolist() == want


def test_markov_llr_equals_the_whole_sequence_likelihood_difference():
    sequence = random_dna(300, seed=3)
    tokenizer = NucleotideTokenizer()
    markov = MarkovModel.fit([tokenizer.encode(sequence)], order=3)

    def total(seq: str) -> float:
        labels = torch.from_numpy(tokenizer.encode(seq))[None]
        logp = torch.log_softmax(markov.logits(labels, tokenizer.vocab_size), -1)
        return float(logp.gather(-1, labels[..., None]).sum())

    snvs = [engine.MutationSNV("c", pos, sequence[pos - 1], alt, "g", 1, 1, "AAA", "missense")
            for pos, alt in [(1, "A"), (2, "C"), (150, "G"), (298, "T"), (300, "A")] if sequence[pos - 1] != alt]
    got = engine.markov_llrs(markov, {"c": sequence}, snvs)
    for snv, llr in zip(snvs, got):
        i = snv.position - 1
        expected = total(sequence[:i] + snv.alt + sequence[i + 1:]) - total(sequence)
        assert llr == pytest.approx(expected, abs=1e-4)


def test_auroc_scores_lower_llr_as_more_damaging():
    classes = ["stop_gain", "stop_gain", "synonymous", "synonymous", "missense"]
    # -llr: stops 3 and 1, synonymous 2 and 0 -> 3 of 4 pairs ordered
    assert engine.auroc(np.array([-3.0, -1.0, -2.0, 0.0, 9.0]), classes, "stop_gain", "synonymous") == 0.75
    assert engine.auroc(np.array([-5.0, -4.0, 1.0, 2.0, 0.0]), classes, "stop_gain", "synonymous") == 1.0
    assert engine.auroc(np.zeros(5), classes[2:4], "stop_gain", "synonymous") is None
    summary = engine.summarise(classes, {"model": np.array([-3.0, -1.0, -2.0, 0.0, 9.0])})
    assert summary["counts"] == {"synonymous": 2, "missense": 1, "stop_gain": 2}
    assert summary["model"]["auroc"]["missense_vs_synonymous"] == 0.0


def test_mutations_command_writes_every_output_on_lambda(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "bench"
    assert cli_main(["mutations", "--ckpt_path", str(tiny_checkpoint), str(LAMBDA), "--out", str(out), "--codons", "40",
                     "--window", "64", "--device", "cpu", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "| lambda_virus | model |" in captured.out and "SNVs" in captured.err
    assert "0.5 = chance" in captured.out and "0.5 = chance" in (out / "summary.md").read_text()
    estimate = [line for line in captured.err.splitlines() if "on the CPU: about" in line]
    assert len(estimate) == 1 and "for 360 SNVs" in estimate[0]  # said before the rest were scored
    rows = (out / "mutations.tsv").read_text().splitlines()
    assert len(rows) == 1 + 40 * 9
    header = rows[0].split("\t")
    assert header[:6] == ["genome", "contig", "pos", "ref", "alt", "gene"]
    sequence = _lambda_sequence()
    for line in rows[1:]:
        cells = dict(zip(header, line.split("\t")))
        assert sequence[int(cells["pos"]) - 1] == cells["ref"] and cells["alt"] != cells["ref"]
        assert np.isfinite(float(cells["model_llr"])) and np.isfinite(float(cells["markov_llr"]))
    summary = json.loads((out / "summary.json").read_text())
    result = summary["genomes"]["lambda_virus"]
    assert sum(result["counts"].values()) == 40 * 9
    assert 0.0 <= result["markov"]["auroc"]["missense_vs_synonymous"] <= 1.0
    assert "Markov k=6" in (out / "summary.md").read_text()
    if (out / "roc.png").exists():
        assert (out / "roc.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_cpu_defaults_are_sized_to_about_a_minute(tiny_checkpoint, tmp_path, capsys):
    """Without --codons and --window a CPU run samples the CPU default of codons at short windows."""
    from biomoe.cli.mutations import CPU_CODONS, CPU_WINDOW

    trained = save_checkpoint(tmp_path / "long.ckpt", *_tiny(), data={"seq_length": 4 * CPU_WINDOW})
    out = tmp_path / "bench"
    assert cli_main(["mutations", str(trained), str(LAMBDA), "--out", str(out), "--device", "cpu",
                     "--no-progress"]) == 0
    capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["codons"] == CPU_CODONS and summary["window"] == CPU_WINDOW
    assert sum(summary["genomes"]["lambda_virus"]["counts"].values()) == 9 * CPU_CODONS


def _tiny():
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                      ffn_hidden_size=32)
    return MoETransformer(cfg), cfg


def test_several_genomes_prepared_together_match_each_alone(tiny_checkpoint, tmp_path, capsys):
    """Genomes are prepared on host threads while the model loads: each genome's rows, in the order
    the files were given, are those of the genome run alone."""
    second = tmp_path / "shifted.fa"
    sequence = _lambda_sequence()
    second.write_text(">shifted\n" + sequence[20000:] + sequence[:20000] + "\n")  # the same genes, other coordinates

    def rows(*fastas: str, out: str) -> list[list[str]]:
        assert cli_main(["mutations", str(tiny_checkpoint), *fastas, "--out", str(tmp_path / out), "--codons", "20",
                         "--window", "64", "--device", "cpu", "--no-progress"]) == 0
        return [line.split("\t") for line in (tmp_path / out / "mutations.tsv").read_text().splitlines()[1:]]

    together = rows(str(second), str(LAMBDA), out="both")
    alone = rows(str(second), out="second") + rows(str(LAMBDA), out="lambda")
    capsys.readouterr()
    assert [row[0] for row in together][:1] == ["shifted"] and len(together) == 2 * 20 * 9
    assert [r[:-2] for r in together] == [r[:-2] for r in alone]
    for a, b in zip(together, alone):
        assert float(a[-1]) == pytest.approx(float(b[-1]), abs=1e-9)  # Markov LLR, host-side
        assert float(a[-2]) == pytest.approx(float(b[-2]), abs=1e-4)  # the model's, batched with other windows


def test_the_cpu_estimate_leaves_the_warm_up_out(monkeypatch, capsys):
    """The first SNVs pay the first forward pass (seconds on a CPU): an estimate from them alone
    said 5 s for a run of about 1 s here. The SNVs after them give the rate."""
    import re
    import time

    from biomoe.cli import mutations as command
    from biomoe.inference import score_variants

    calls: list[int] = []

    def fake_score_windows(model, variants, prepared, progress=None, batch_tokens=None):
        time.sleep(0.5 if not calls else 0.001 * len(variants))  # warm-up, then 1 ms an SNV
        calls.append(len(variants))
        return [{"llr": 0.0}] * len(variants)

    monkeypatch.setattr(score_variants, "score_windows", fake_score_windows)
    snvs = list(range(640))
    rows = command._score(None, snvs, snvs, None, None, estimate=True)
    assert len(rows) == 640 and calls == [command.FIRST_SNVS, command.FIRST_SNVS, 640 - 2 * command.FIRST_SNVS]
    line = next(line for line in capsys.readouterr().err.splitlines() if "on the CPU: about" in line)
    assert float(re.search(r"about (\d+) s for 640 SNVs", line).group(1)) <= 2
