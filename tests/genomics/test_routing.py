"""``routing``: per-genome expert routing counts, their JSON summary, the figure and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from biomoe.data.tokenizer import BOS_ID, NucleotideTokenizer
from biomoe.genomics.routing import (RoutingCounter, jensen_shannon_bits, species_of, specificity,
                                     window_starts)
from biomoe.model.config import ModelConfig
from biomoe.model.transformer import MoETransformer
from biomoe.cli.main import main as cli_main
from conftest import random_dna, save_checkpoint
from helpers.routing_reference import direct_topk

TOK = NucleotideTokenizer()
SEQ = 32
WINDOWS = 6
TOP_K = 2
EXPERTS = 4
MOE_LAYERS = [0, 2]  # block 1 is dense and has no router


def tiny_model(moe_layers: list[int] | None = None) -> MoETransformer:
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_layers=3, num_heads=4, num_kv_heads=2, num_experts=EXPERTS, top_k=TOP_K,
                      ffn_hidden_size=32, init_std=0.3, moe_layers=MOE_LAYERS if moe_layers is None else moe_layers)
    return MoETransformer(cfg).eval()


@pytest.fixture
def model() -> MoETransformer:
    return tiny_model()


@pytest.fixture
def inputs(tmp_path, model, write_fasta):
    """A checkpoint and three genomes: two of one species (AT-rich, one with an N gap), one GC-rich."""
    ckpt = save_checkpoint(tmp_path / "tiny.ckpt", model, model.config, data={"seq_length": SEQ})
    at_rich = random_dna(600, seed=1, alphabet="AATTACGT")
    fastas = [write_fasta({"chr": at_rich, "plasmid": random_dna(90, seed=2, alphabet="AATTACGT")},
                          name="ecoli_a.fna.gz", compression="gzip"),
              write_fasta({"c1": random_dna(300, seed=3, alphabet="AATTACGT") + "N" * 200}, name="ecoli_b.fa"),
              write_fasta({"c1": random_dna(500, seed=4, alphabet="GGCCACGT")}, name="saureus_col.fasta")]
    return ckpt, fastas


def run(ckpt, fastas, out, *extra) -> int:
    return cli_main(["routing", "--ckpt_path", str(ckpt), "--fasta", *map(str, fastas), "--windows", str(WINDOWS),
                     "--seq_length", str(SEQ), "--batch_size", "4", "--out", str(out), "--no_progress", *extra])


def direct_topk_counts(model: MoETransformer, ids: torch.Tensor) -> dict[int, np.ndarray]:
    """Expert counts per MoE block of the base positions of ``ids``, from the independent top-k of
    :func:`helpers.routing_reference.direct_topk` (no hooks, no biomoe.genomics.routing)."""
    return {i: np.bincount(chosen.reshape(-1), minlength=model.config.num_experts)
            for i, chosen in direct_topk(model, ids).items()}


def test_hook_counts_equal_the_routers_own_top_k(model):
    ids = torch.tensor([[BOS_ID, *TOK.encode(random_dna(40, seed=s))] for s in range(3)])
    counter = RoutingCounter(model)
    assert counter.layers == MOE_LAYERS
    counter.run(model, ids)
    expected = direct_topk_counts(model, ids)
    assert set(expected) == set(MOE_LAYERS)
    for layer in MOE_LAYERS:
        np.testing.assert_array_equal(counter.counts[layer].numpy(), expected[layer])
        assert int(counter.counts[layer].sum()) == 3 * 40 * TOP_K
    assert all(not router._forward_hooks for router in counter.routers.values())  # hooks removed


def test_windows_are_spread_evenly_and_deterministic():
    starts = window_starts([100, 5, 60], seq_length=10, count=6)
    assert starts == window_starts([100, 5, 60], seq_length=10, count=6)
    assert all(c != 1 for c, _ in starts)  # a contig shorter than a window takes none
    assert all(0 <= s <= (100, 5, 60)[c] - 10 for c, s in starts)
    offsets = [s if c == 0 else 91 + s for c, s in starts]  # laid end to end: 91 + 51 starts
    assert np.ptp(np.diff(offsets)) <= 1 and len(starts) == 6
    assert window_starts([9], seq_length=10, count=3) == []


def test_jensen_shannon_and_species():
    assert jensen_shannon_bits([0.5, 0.5], [0.5, 0.5]) == pytest.approx(0.0)
    assert jensen_shannon_bits([1.0, 0.0], [0.0, 1.0]) == pytest.approx(1.0)
    assert 0 < jensen_shannon_bits([0.7, 0.3], [0.4, 0.6]) == pytest.approx(jensen_shannon_bits([0.4, 0.6], [0.7, 0.3]))
    assert species_of("ecoli_536") == "ecoli" and species_of("saureus_col_x") == "saureus"
    assert species_of("plain") == "plain"
    fractions = {"a_1": {"0": [1.0, 0.0]}, "a_2": {"0": [1.0, 0.0]}, "b_1": {"0": [0.0, 1.0]}}
    summary = specificity(fractions, {g: species_of(g) for g in fractions}, ["0"])
    assert summary["per_layer"]["0"] == {"within_species_jsd_bits": 0.0, "between_species_jsd_bits": 1.0,
                                         "within_species_pairs": 1, "between_species_pairs": 2}
    assert summary["mean_within_species_jsd_bits"] == 0.0 and summary["mean_between_species_jsd_bits"] == 1.0


def test_routing_command_writes_fractions_summary_and_figure(inputs, model, tmp_path, capsys):
    ckpt, fastas = inputs
    out = tmp_path / "res" / "routing.json"
    assert run(ckpt, fastas, out) == 0
    assert "wrote" in capsys.readouterr().out
    report = json.loads(out.read_text())
    png = out.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report["moe_layers"] == MOE_LAYERS and report["checkpoint"] == str(ckpt)
    assert report["command"].startswith("biomoe routing --ckpt_path")
    assert list(report["genomes"]) == ["ecoli_a", "ecoli_b", "saureus_col"]
    assert report["species"] == {"ecoli": ["ecoli_a", "ecoli_b"], "saureus": ["saureus_col"]}
    # ecoli_b: 300 bases then 200 N, so windows from its last 200 bases are mostly N and skipped
    assert report["genomes"]["ecoli_b"]["skipped_windows"] > 0
    for genome in report["genomes"].values():
        assert genome["windows"] + genome["skipped_windows"] == WINDOWS
        for layer in map(str, MOE_LAYERS):
            assert sum(genome["counts"][layer]) == genome["windows"] * SEQ * TOP_K == genome["assignments"]
            assert sum(genome["fractions"][layer]) == pytest.approx(1.0)
            assert len(genome["fractions"][layer]) == EXPERTS
    assert report["genomes"]["ecoli_a"]["windows"] == WINDOWS
    means = report["species_mean_fractions"]["ecoli"]["0"]
    members = [report["genomes"][g]["fractions"]["0"] for g in ("ecoli_a", "ecoli_b")]
    np.testing.assert_allclose(means, np.mean(members, axis=0))
    per_layer = report["specificity"]["per_layer"]
    assert set(per_layer) == {"0", "2"}
    assert per_layer["0"]["within_species_pairs"] == 1 and per_layer["0"]["between_species_pairs"] == 2
    assert per_layer["2"]["within_species_jsd_bits"] == pytest.approx(jensen_shannon_bits(
        report["genomes"]["ecoli_a"]["fractions"]["2"], report["genomes"]["ecoli_b"]["fractions"]["2"]))
    assert report["specificity"]["mean_between_species_jsd_bits"] == pytest.approx(np.mean(
        [v["between_species_jsd_bits"] for v in per_layer.values()]))


def test_counts_are_those_of_the_evenly_spread_windows(inputs, model, tmp_path):
    ckpt, fastas = inputs
    out = tmp_path / "routing.json"
    assert run(ckpt, fastas[2:], out, "--no_plot") == 0
    assert not out.with_suffix(".png").exists()
    seq = "".join(line.strip() for line in fastas[2].read_text().splitlines()[1:])
    ids = torch.tensor([[BOS_ID, *TOK.encode(seq[s:s + SEQ])]
                        for _, s in window_starts([len(seq)], SEQ, WINDOWS)])
    expected = direct_topk_counts(model, ids)
    got = json.loads(out.read_text())["genomes"]["saureus_col"]["counts"]
    for layer in MOE_LAYERS:
        assert got[str(layer)] == expected[layer].tolist()


def test_from_json_redraws_without_the_model(inputs, tmp_path):
    ckpt, fastas = inputs
    out = tmp_path / "routing.json"
    assert run(ckpt, fastas, out, "--no_plot") == 0
    ckpt.unlink()  # the model is not needed any more
    png = tmp_path / "again.png"
    assert cli_main(["routing", "--from_json", str(out), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_figure_for_eight_layers_of_eight_experts(tmp_path):
    from biomoe.genomics.routing import GenomeRouting, routing_report
    from biomoe.genomics.routing_plot import plot_routing

    rng = np.random.default_rng(0)
    labels = [f"{sp}_{i}" for sp, n in (("ecoli", 4), ("saureus", 4), ("paeruginosa", 3)) for i in range(n)]
    results = [GenomeRouting(g, g + ".fa", 4, 0, {layer: rng.multinomial(4 * 64 * 2, np.ones(8) / 8).tolist()
                                                  for layer in range(8)}) for g in labels]
    report = routing_report(results, list(range(8)), 8, 2, 64, 4, "x.ckpt", "biomoe routing")
    path = plot_routing(report, tmp_path / "big.png")
    assert path.stat().st_size > 10_000


def test_bad_input_is_one_line(inputs, tmp_path, capsys, write_fasta):
    ckpt, fastas = inputs
    out = tmp_path / "r.json"
    not_fasta = tmp_path / "notes.fa"
    not_fasta.write_text("this is not a FASTA file\n")
    dense = tiny_model(moe_layers=[])
    dense_ckpt = save_checkpoint(tmp_path / "dense.ckpt", dense, dense.config)
    cases = [
        (lambda: run(ckpt, [tmp_path / "missing.fa"], out), "missing.fa"),
        (lambda: run(ckpt, [not_fasta], out), "notes.fa: not a FASTA file"),
        (lambda: run(tmp_path / "nothing.ckpt", fastas, out), "nothing.ckpt"),
        (lambda: run(ckpt, fastas, fastas[1]), "ecoli_b.fa: is also an input"),
        (lambda: run(ckpt, fastas, out, "--plot", str(fastas[0])), "ecoli_a.fna.gz: is also an input"),
        (lambda: run(ckpt, fastas, out, "--windows", "0"), "--windows"),
        (lambda: run(dense_ckpt, fastas, out), "no MoE layer"),
        (lambda: cli_main(["routing", "--from_json", str(fastas[1]), "--plot", str(tmp_path / "p.png")]),
         "ecoli_b.fa"),
        (lambda: cli_main(["routing", "--fasta", str(fastas[0])]), "--ckpt_path"),
    ]
    before = fastas[1].read_bytes()
    for command, message in cases:
        code = command()
        err = capsys.readouterr().err.strip()
        assert code == 2, err
        assert err.startswith("biomoe: error:") and message in err and "\n" not in err, err
    assert fastas[1].read_bytes() == before  # the input named as --out is intact
    assert not out.exists() and not list(tmp_path.glob(".*.tmp*"))
