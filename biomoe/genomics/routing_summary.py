"""The console summary of ``biomoe routing``: which experts take which bases, in a few lines.

The JSON and the heatmaps hold everything, but a user who just ran the command wants to know at a
glance whether the experts share the work and what each one takes. Per MoE block this prints the
share of the top-k assignments each expert took (pooled over every genome routed), and, where the
report holds genomic classes (``--features``), each expert's most enriched classes: the ones it
takes most above their share of the bases. An expert that took no assignment at all in a block is
named in a note of its own: it is trained capacity the model does not use on these genomes (a
sign of router collapse when several are idle).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["TOP_CLASSES", "expert_shares", "idle_experts", "routing_summary_lines", "top_classes"]

TOP_CLASSES = 2
"""Classes named per expert (the most enriched first)."""
MIN_ENRICHMENT = 1.05
"""A class is named only if the expert takes it at least this much above its share."""


def expert_shares(report: dict[str, Any], layer: str) -> tuple[np.ndarray, int]:
    """(share of the block's assignments per expert, pooled over every genome; total assignments)."""
    counts = np.sum([np.asarray(genome["counts"][layer], dtype=np.int64)
                     for genome in report["genomes"].values()], axis=0)
    total = int(counts.sum())
    return (counts / total if total else np.zeros(counts.shape, dtype=np.float64)), total


def idle_experts(shares: Sequence[float]) -> list[int]:
    """The experts that took no assignment."""
    return [expert for expert, share in enumerate(shares) if share == 0]


def top_classes(report: dict[str, Any], layer: str, expert: int, limit: int = TOP_CLASSES) -> list[tuple[str, float]]:
    """(class, enrichment) of the classes ``expert`` takes most above their share in ``layer``, of
    every class group the report's ``features`` hold; [] without them."""
    features = report.get("features")
    if not features:
        return []
    found: list[tuple[str, float]] = []
    for group, table in features["per_layer"][layer].items():
        names = features["groups"][group]
        if group == "species" and len(names) < 2:
            continue  # one species: every base is of it
        for name, value in zip(names, table["enrichment"][expert]):
            if value is not None and value >= MIN_ENRICHMENT:
                found.append((name, float(value)))
    return sorted(found, key=lambda item: -item[1])[:limit]


def routing_summary_lines(report: dict[str, Any]) -> list[str]:
    """The console lines: a header, per MoE block the experts' shares (and, with genomic classes,
    what each expert takes), and a note per block with idle experts."""
    top_k = report["top_k"]
    lines = [f"expert load per MoE block: share of the top-{top_k} assignments over "
             f"{len(report['genomes'])} genome{'' if len(report['genomes']) == 1 else 's'}"
             + (" (with --features: the classes each expert takes most above their share)"
                if report.get("features") else "")]
    notes: list[str] = []
    for layer in map(str, report["moe_layers"]):
        shares, total = expert_shares(report, layer)
        lines.append(f"  block {layer}: " + " | ".join(f"e{expert} {share:.1%}" for expert, share in enumerate(shares)))
        if report.get("features"):
            for expert in range(len(shares)):
                classes = top_classes(report, layer, expert)
                taken = ", ".join(f"{name} x{value:.2f}" for name, value in classes) if classes else \
                    ("none (no load)" if shares[expert] == 0 else "no class above its share")
                lines.append(f"    e{expert}: {taken}")
        idle = idle_experts(shares)
        if idle:
            names = ", ".join(f"e{expert}" for expert in idle)
            notes.append(f"note: block {layer}: expert{'s' if len(idle) > 1 else ''} {names} took none of the "
                         f"{total:,} assignments (no load on these genomes)")
    return lines + notes
