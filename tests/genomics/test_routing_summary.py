"""``routing``'s console summary: each MoE block's load per expert, what each expert takes (with
genomic classes) and a note for every expert that took no bases."""

from __future__ import annotations

import json

import numpy as np
import pytest

from biomoe.genomics.routing import GenomeRouting, routing_report
from biomoe.genomics.routing_summary import expert_shares, idle_experts, routing_summary_lines, top_classes

from test_routing import EXPERTS, MOE_LAYERS, inputs, model, run  # noqa: F401 (fixtures)


def report_of(counts_per_genome: dict[str, dict[int, list[int]]]) -> dict:
    results = [GenomeRouting(label, label + ".fa", 4, 0, counts) for label, counts in counts_per_genome.items()]
    layers = sorted(next(iter(counts_per_genome.values())))
    return routing_report(results, layers, 4, 2, 64, 4, "x.ckpt", "biomoe routing")


def test_shares_are_pooled_over_genomes_and_idle_experts_get_a_note():
    report = report_of({"ecoli_a": {0: [300, 100, 0, 112], 3: [128, 128, 128, 128]},
                        "ecoli_b": {0: [200, 200, 0, 112], 3: [0, 256, 0, 256]}})
    shares, total = expert_shares(report, "0")
    assert total == 1024 and shares.tolist() == pytest.approx([500 / 1024, 300 / 1024, 0.0, 224 / 1024])
    assert idle_experts(shares) == [2]
    lines = routing_summary_lines(report)
    assert lines[0] == "expert load per MoE block: share of the top-2 assignments over 2 genomes"
    assert lines[1] == "  block 0: e0 48.8% | e1 29.3% | e2 0.0% | e3 21.9%"
    assert lines[2] == "  block 3: e0 12.5% | e1 37.5% | e2 12.5% | e3 37.5%"
    assert lines[3:] == ["note: block 0: expert e2 took none of the 1,024 assignments (no load on these genomes)"]


def test_several_idle_experts_of_a_block_share_one_note():
    lines = routing_summary_lines(report_of({"a": {1: [0, 512, 0, 0]}}))
    assert lines[-1] == "note: block 1: experts e0, e2, e3 took none of the 512 assignments (no load on these genomes)"
    assert "over 1 genome" in lines[0]


def test_each_expert_is_named_with_the_classes_it_takes_most_above_their_share():
    per_layer = {"0": {"region": {"enrichment": [[1.8, 0.2], [0.5, 1.5], [None, None], [1.0, 1.0]]},
                       "window_gc": {"enrichment": [[1.1, 0.9, 1.0, 1.0], [1.0, 1.0, 1.0, 2.5],
                                                    [None] * 4, [1.0, 1.0, 1.0, 1.0]]},
                       "species": {"enrichment": [[1.0], [1.0], [None], [1.0]]}}}
    report = report_of({"a": {0: [100, 100, 0, 56]}})
    report["features"] = {"groups": {"region": ["coding", "non-coding"],
                                     "window_gc": ["GC<35%", "GC 35-45%", "GC 45-55%", "GC>=55%"],
                                     "species": ["a"]}, "per_layer": per_layer}
    assert top_classes(report, "0", 0) == [("coding", 1.8), ("GC<35%", 1.1)]
    assert top_classes(report, "0", 1) == [("GC>=55%", 2.5), ("non-coding", 1.5)]
    lines = routing_summary_lines(report)
    assert lines[0].endswith("(with --features: the classes each expert takes most above their share)")
    assert lines[2:6] == ["    e0: coding x1.80, GC<35% x1.10", "    e1: GC>=55% x2.50, non-coding x1.50",
                          "    e2: none (no load)", "    e3: no class above its share"]


def test_the_routing_command_prints_the_load_it_wrote(inputs, tmp_path, capsys):  # noqa: F811
    ckpt, fastas = inputs
    out = tmp_path / "routing.json"
    assert run(ckpt, fastas, out, "--no_plot") == 0
    printed = capsys.readouterr().out.splitlines()
    report = json.loads(out.read_text())
    assert "expert load per MoE block: share of the top-2 assignments over 3 genomes" in printed
    for layer in map(str, MOE_LAYERS):
        pooled = np.sum([g["counts"][layer] for g in report["genomes"].values()], axis=0)
        line = next(line for line in printed if line.startswith(f"  block {layer}: "))
        shown = [float(cell.split()[1].rstrip("%")) for cell in line.split(": ", 1)[1].split(" | ")]
        assert len(shown) == EXPERTS
        assert shown == pytest.approx((100 * pooled / pooled.sum()).tolist(), abs=0.051)
