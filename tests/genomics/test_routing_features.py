"""``routing --features``: genomic classes of the routed bases, their enrichment per expert, the JSON
section, the class figure and redrawing from JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from biomoe.cli.main import main as cli_main
from biomoe.data.sources.registry import open_reader
from biomoe.data.tokenizer import BOS_ID, NucleotideTokenizer
from biomoe.genomics import routing_features
from biomoe.genomics.genes import Gene
from biomoe.genomics.routing import RoutingCounter, genome_routing, routing_report, window_starts
from biomoe.genomics.routing_features import (GC_BINS, GROUPS, base_states, enrichment_table, gc_bin,
                                              genome_features)
from biomoe.model.config import ModelConfig
from biomoe.model.transformer import MoETransformer
from conftest import random_dna, save_checkpoint
from helpers.routing_reference import direct_topk

TOK = NucleotideTokenizer()
SEQ = 32
WINDOWS = 40
TOP_K = 2
EXPERTS = 4
MOE_LAYERS = [0, 2]
COMPLEMENT = str.maketrans("ACGT", "TGCA")


def tiny_model() -> MoETransformer:
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_layers=3, num_heads=4, num_kv_heads=2, num_experts=EXPERTS, top_k=TOP_K,
                      ffn_hidden_size=32, init_std=0.3, moe_layers=MOE_LAYERS)
    return MoETransformer(cfg).eval()


def synthetic_genome(seed: int = 1) -> tuple[str, tuple[int, int], tuple[int, int]]:
    """Random sequence holding two long ORFs behind a Shine-Dalgarno motif, one on each strand, and
    the (start, end) of each ORF (0-based, half-open, forward coordinates)."""
    rng = np.random.default_rng(seed)
    sense = [a + b + c for a in "ACGT" for b in "ACGT" for c in "ACGT" if a + b + c not in ("TAA", "TAG", "TGA")]

    def bases(n: int) -> str:
        return "".join(rng.choice(list("ACGT"), n))

    def orf(codons: int) -> str:
        return "ATG" + "".join(rng.choice(sense, codons)) + "TAA"

    plus = "AGGAGG" + bases(8) + orf(300)
    minus = ("AGGAGG" + bases(8) + orf(250)).translate(COMPLEMENT)[::-1]
    sequence = bases(300) + plus + bases(400) + minus + bases(300)
    plus_start = 300 + 14
    minus_start = 300 + len(plus) + 400
    return sequence, (plus_start, plus_start + 906), (minus_start, minus_start + 756)


def hand_states(genes: list[Gene], length: int) -> np.ndarray:
    """The state of every base, labelled base by base: 0 outside genes, 1..3 the codon position on a
    plus-strand gene, 4..6 on a minus-strand gene (counted from its end); a later gene wins."""
    states = np.zeros(length, dtype=np.int64)
    for gene in genes:
        for i, coord in enumerate(range(gene.start, gene.end) if gene.strand > 0
                                  else range(gene.end - 1, gene.start - 1, -1)):
            states[coord] = (i % 3 + 1) + (0 if gene.strand > 0 else 3)
    return states


def test_base_states_read_codons_in_each_genes_direction():
    genes = [Gene("c", 3, 12, +1), Gene("c", 20, 29, -1)]
    states = base_states(genes, 32, "c")
    np.testing.assert_array_equal(states, hand_states(genes, 32))
    assert states[3:12].tolist() == [1, 2, 3] * 3  # plus strand: first codon base at the lowest coordinate
    assert states[20:29].tolist() == [6, 5, 4] * 3  # minus strand: codon position 1 at the highest coordinate
    assert states[28] == 4 and states[27] == 5 and states[26] == 6
    assert not states[:3].any() and not states[12:20].any() and not states[29:].any()
    assert not base_states(genes, 32, "other").any()  # genes of another contig


def test_window_gc_bins():
    assert gc_bin("AAAAAAAAAT") == 0  # 0 %
    assert gc_bin("GCCAAAAATT") == 0  # 30 %
    assert gc_bin("GGGGCCCCAAAAAAAATTTT") == 1  # 40 %
    assert gc_bin("GGGGCCCCCAAAAAAATTTT") == 2  # exactly 45 %: the upper bin
    assert gc_bin("GGGGGCCCCCCAAAAATTTT") == 3  # 55 %
    assert gc_bin("GCNNNNNNNNNNAT") == 2  # N is not counted: 2 of 4 ACGT
    assert gc_bin("gcgcat") == 3


def test_enrichment_is_the_experts_fraction_over_the_class_share():
    table = enrichment_table([[30, 10], [10, 50], [0, 0]])
    assert table["share"] == pytest.approx([0.4, 0.6])
    assert table["fraction"][0] == pytest.approx([0.75, 0.25])
    assert table["fraction"][1] == pytest.approx([1 / 6, 5 / 6])
    assert table["enrichment"][0] == pytest.approx([0.75 / 0.4, 0.25 / 0.6])
    assert table["enrichment"][1] == pytest.approx([(1 / 6) / 0.4, (5 / 6) / 0.6])
    assert table["fraction"][2] == [None, None] and table["enrichment"][2] == [None, None]  # never chosen
    even = enrichment_table([[5, 15], [10, 30]])["enrichment"]
    assert np.allclose(even, 1.0)  # every expert takes the classes as the data offers them
    empty_class = enrichment_table([[4, 0], [6, 0]])
    assert empty_class["share"] == [1.0, 0.0] and empty_class["enrichment"][0] == [1.0, None]


def test_cell_counts_match_each_bases_own_class_and_router_choice(tmp_path, write_fasta, monkeypatch):
    """Every (class, expert) count equals a count made base by base from the router's own top-k at
    that base's position (<bos> shifts the input by one) and the base's hand-made label."""
    sequence = random_dna(900, seed=5, alphabet="AATTGCGCAAT")
    genes = [Gene("chr", 40, 331, +1), Gene("chr", 400, 700, -1), Gene("chr", 690, 801, +1)]  # the last two overlap
    monkeypatch.setattr(routing_features, "call_genes_in_contigs", lambda contigs, **_: list(genes))
    fasta = write_fasta({"chr": sequence}, name="ecoli_x.fa")
    reader = open_reader(fasta)
    features = genome_features(reader, "ecoli_x")
    assert features.genes == 3 and features.mode == "meta"
    assert features.coding_fraction == pytest.approx(np.count_nonzero(hand_states(genes, 900)) / 900)
    model = tiny_model()
    counter = RoutingCounter(model)
    result = genome_routing(model, counter, reader, "ecoli_x", WINDOWS, SEQ, 8, features=features)

    starts = [s for _, s in window_starts([900], SEQ, WINDOWS)]
    ids = torch.tensor([[BOS_ID, *TOK.encode(sequence[s:s + SEQ])] for s in starts])
    chosen = direct_topk(model, ids)
    states = hand_states(genes, 900)
    for layer in MOE_LAYERS:
        expected = np.zeros((7 * GC_BINS, EXPERTS), dtype=np.int64)
        for row, start in enumerate(starts):
            window = sequence[start:start + SEQ]
            gc = (window.count("G") + window.count("C")) / SEQ
            gc_class = 0 if gc < 0.35 else 1 if gc < 0.45 else 2 if gc < 0.55 else 3
            for j in range(SEQ):
                for expert in chosen[layer][row, j]:
                    expected[states[start + j] * GC_BINS + gc_class, expert] += 1
        cells = np.array(result.features["cells"][layer])
        np.testing.assert_array_equal(cells, expected)
        assert cells.sum() == WINDOWS * SEQ * TOP_K
        np.testing.assert_array_equal(cells.sum(axis=0), result.counts[layer])  # the plain counts, per expert

    report = routing_report([result], MOE_LAYERS, EXPERTS, TOP_K, SEQ, WINDOWS, "x.ckpt", "biomoe routing")
    assert report["format"] == "biomoe-routing/2"
    for layer in map(str, MOE_LAYERS):
        groups = report["features"]["per_layer"][layer]
        assert set(groups) == {*GROUPS, "species"}
        total = np.array(groups["region"]["counts"]).sum()
        assert total == WINDOWS * SEQ * TOP_K
        for name in ("window_gc", "species"):
            assert np.array(groups[name]["counts"]).sum() == total
        coding = np.array(groups["region"]["counts"])[:, 0]  # codon positions and strands split coding bases
        np.testing.assert_array_equal(np.array(groups["codon_position"]["counts"]).sum(axis=1), coding)
        np.testing.assert_array_equal(np.array(groups["gene_strand"]["counts"]).sum(axis=1), coding)
        plus = np.isin(states, [1, 2, 3])
        assert np.array(groups["gene_strand"]["counts"]).sum(axis=0)[0] == sum(
            int(plus[s:s + SEQ].sum()) for s in starts) * TOP_K


def test_without_gene_calls_the_report_keeps_the_first_format(tmp_path, write_fasta):
    reader = open_reader(write_fasta({"chr": random_dna(400, seed=2)}, name="a_1.fa"))
    model = tiny_model()
    result = genome_routing(model, RoutingCounter(model), reader, "a_1", 4, SEQ, 4)
    report = routing_report([result], MOE_LAYERS, EXPERTS, TOP_K, SEQ, 4, "x.ckpt", "biomoe routing")
    assert report["format"] == "biomoe-routing/1" and "features" not in report


def test_prodigal_calls_the_synthetic_genes_on_both_strands(write_fasta, monkeypatch):
    sequence, (plus_start, plus_end), (minus_start, minus_end) = synthetic_genome()
    calls: list[Gene] = []
    real_caller = routing_features.call_genes_in_contigs
    monkeypatch.setattr(routing_features, "call_genes_in_contigs",
                        lambda contigs, **kw: calls.extend(real_caller(contigs, **kw)) or calls)
    features = genome_features(open_reader(write_fasta({"chr": sequence}, name="synth.fa")), "synth")
    assert features.mode == "meta"  # 2.7 kb: too short to train on
    assert {(g.start, g.end, g.strand) for g in calls} == {(plus_start, plus_end, 1), (minus_start, minus_end, -1)}
    states = features.states[0]
    assert states[plus_start:plus_start + 6].tolist() == [1, 2, 3, 1, 2, 3]  # the ATG is codon 1
    assert states[plus_end - 3:plus_end].tolist() == [1, 2, 3]  # the stop codon ends the gene
    assert states[minus_end - 6:minus_end].tolist() == [6, 5, 4, 6, 5, 4]  # CAT read backwards: ATG
    assert states[minus_start:minus_start + 3].tolist() == [6, 5, 4]
    assert not states[:plus_start].any() and not states[plus_end:minus_start].any()
    assert not states[minus_end:].any()


@pytest.fixture
def inputs(tmp_path, write_fasta):
    model = tiny_model()
    ckpt = save_checkpoint(tmp_path / "tiny.ckpt", model, model.config, data={"seq_length": SEQ})
    sequence, _, _ = synthetic_genome()
    fastas = [write_fasta({"chr": sequence}, name="ecoli_synth.fa"),
              write_fasta({"c1": random_dna(1500, seed=4, alphabet="GGCCACGT")}, name="saureus_col.fasta")]
    return ckpt, fastas


def run(ckpt, fastas, out, *extra) -> int:
    return cli_main(["routing", "--ckpt_path", str(ckpt), "--fasta", *map(str, fastas), "--windows", str(WINDOWS),
                     "--seq_length", str(SEQ), "--batch_size", "16", "--out", str(out), "--no_progress", *extra])


def is_png(path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_routing_features_command_writes_classes_both_figures_and_redraws_them(inputs, tmp_path, capsys):
    ckpt, fastas = inputs
    out = tmp_path / "res" / "routing.json"
    assert run(ckpt, fastas, out, "--features") == 0
    captured = capsys.readouterr()
    assert "ecoli_synth: 2 genes (meta mode)" in captured.err and "Traceback" not in captured.err
    png, classes_png = out.with_suffix(".png"), out.with_name("routing-features.png")
    assert is_png(png) and is_png(classes_png) and f"wrote {classes_png}" in captured.out
    report = json.loads(out.read_text())
    assert report["format"] == "biomoe-routing/2"
    features = report["features"]
    assert features["groups"]["species"] == ["ecoli", "saureus"]
    assert features["genomes"]["ecoli_synth"]["genes"] == 2
    for label, genome in report["genomes"].items():
        for layer in map(str, MOE_LAYERS):
            for group, counts in features["genomes"][label]["counts"][layer].items():
                counts = np.array(counts)
                assert counts.shape == (EXPERTS, len(features["groups"][group]))
                if group in ("region", "window_gc"):  # every assignment of the genome, per expert
                    np.testing.assert_array_equal(counts.sum(axis=1), genome["counts"][layer])
    for layer in map(str, MOE_LAYERS):
        for table in features["per_layer"][layer].values():
            counts = np.array(table["counts"], dtype=float)
            share = counts.sum(axis=0) / counts.sum()
            assert table["share"] == pytest.approx(share.tolist())
            for e in range(EXPERTS):
                if counts[e].sum():
                    assert table["enrichment"][e] == pytest.approx(
                        [None if s == 0 else c / counts[e].sum() / s for c, s in zip(counts[e], share)])
        species = np.array(features["per_layer"][layer]["species"]["counts"])
        np.testing.assert_array_equal(species[:, 1], report["genomes"]["saureus_col"]["counts"][layer])

    ckpt.unlink()  # redrawing needs the JSON only
    again = tmp_path / "again.png"
    assert cli_main(["routing", "--from_json", str(out), "--plot", str(again), "--features"]) == 0
    assert is_png(again) and is_png(tmp_path / "again-features.png")


def test_from_json_reads_a_result_without_classes(inputs, tmp_path, capsys):
    ckpt, fastas = inputs
    out = tmp_path / "plain.json"
    assert run(ckpt, fastas[1:], out, "--no_plot") == 0
    assert json.loads(out.read_text())["format"] == "biomoe-routing/1"
    again = tmp_path / "again.png"
    assert cli_main(["routing", "--from_json", str(out), "--plot", str(again)]) == 0
    assert is_png(again) and not (tmp_path / "again-features.png").exists()
    capsys.readouterr()
    assert cli_main(["routing", "--from_json", str(out), "--plot", str(tmp_path / "p.png"), "--features"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("biomoe: error:") and "plain.json" in err and "--features" in err and "\n" not in err
    assert not (tmp_path / "p.png").exists()


def test_features_without_a_figure_write_the_classes_to_the_json_only(inputs, tmp_path):
    ckpt, fastas = inputs
    out = tmp_path / "r.json"
    assert run(ckpt, fastas, out, "--features", "--no_plot") == 0
    assert "features" in json.loads(out.read_text()) and not list(tmp_path.glob("*.png"))


def test_a_class_figure_that_fails_leaves_every_earlier_output(inputs, tmp_path, monkeypatch, capsys):
    """The JSON, the heatmap and the class figure are one result: a failure writing the last keeps
    all three as the earlier run left them."""
    from biomoe.cli import routing

    ckpt, fastas = inputs
    out = tmp_path / "r" / "routing.json"
    assert run(ckpt, fastas, out, "--features") == 0
    before = {p.name: p.read_bytes() for p in out.parent.iterdir()}
    assert set(before) == {"routing.json", "routing.png", "routing-features.png"}

    def full_disk(report, path, dpi=150, atomic=True):
        open(path, "wb").write(b"\x89PNG partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(routing, "plot_features", full_disk)
    capsys.readouterr()
    assert run(ckpt, fastas[1:], out, "--features") == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # after the note on the gene calls
    assert last.startswith("biomoe: error:") and "routing-features.png" in last and "Traceback" not in err, err
    assert {p.name: p.read_bytes() for p in out.parent.iterdir()} == before
