"""The multi-GPU scaling tables, read from the scaling reports in results/scaling.

A report is what ``python -m bench.scaling report`` merged: one entry per point (one short
``cli.py fit``), each with the environment of the machine that ran it where the runner recorded one.
The report's own machine block is the machine that merged the points, never the one that ran them,
so these tables read the points' environments only; for points from before the runner recorded
them, the footer says where the machine is named instead of taking the merging machine for it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from bench.docs_tables.cells import table
from bench.docs_tables.report import DATES_NOT_IN_FILE, DocsTableError, Report, Table

TWO_GPU = "results/scaling/mixtral-2gpu-config-warmup/scaling.json"
FOUR_GPU = "results/scaling/mixtral-4gpu/scaling.json"

RUNS_README = "results/README.md"
RUNS_README_NAMES = "NVIDIA H200s, torch 2.11.0+cu130 and Transformer Engine 2.20.2"
NOTED_IN_RUNS_README = frozenset({TWO_GPU, FOUR_GPU})
"""Reports whose points predate the runner recording its environment: the machine and software of
their runs are named in :data:`RUNS_README` only (a test checks that it still says so)."""

CONCURRENT_MARKS = "†‡§¶"
POINT_KEYS = ("layers", "precision", "layout", "gpus", "tokens_per_s_per_gpu", "steps_timed")


@dataclass(frozen=True)
class Column:
    header: str
    layout: str
    efficiency: bool = True


def _points(rep: Report) -> list[dict[str, Any]]:
    points = rep.data.get("results")
    if not isinstance(points, list) or not points:
        raise DocsTableError(f"{rep.path}: not a scaling report (no 'results' list)")
    for point in points:
        missing = [key for key in POINT_KEYS if key not in point]
        if missing:
            raise DocsTableError(f"{rep.path}: a point without {', '.join(missing)} (not a scaling report)")
    return points


def _row_key(point: dict[str, Any]) -> tuple[int, str, bool]:
    return point["layers"], point["precision"], bool(point.get("activation_checkpointing"))


def _row_label(key: tuple[int, str, bool], with_depth: bool) -> str:
    layers, precision, ac = key
    label = f"{layers} layers, {precision}" if with_depth else precision
    return label + (", activation checkpointing" if ac else "")


def _cell(point: dict[str, Any] | None, column: Column, memory: bool, marks: dict[str, str]) -> str:
    """``9,643 (96 %, 40.2 GB)``: per-GPU tokens/s, efficiency against the 1-GPU point, rank 0's peak."""
    if point is None:
        return "—"
    notes = []
    if column.efficiency and point.get("efficiency") is not None:
        notes.append(f"{point['efficiency'] * 100:.0f} %")
    if memory and point.get("peak_mem_gb") is not None:
        notes.append(f"{point['peak_mem_gb']:.1f} GB")
    text = f"{point['tokens_per_s_per_gpu']:,.0f}" + (f" ({', '.join(notes)})" if notes else "")
    return text + marks.get(point.get("concurrent") or "", "")


def _concurrent_marks(rep: Report, points: list[dict[str, Any]]) -> dict[str, str]:
    notes = list(dict.fromkeys(p["concurrent"] for p in points if p.get("concurrent")))
    if len(notes) > len(CONCURRENT_MARKS):
        raise DocsTableError(f"{rep.path}: {len(notes)} different 'concurrent' notes, more than the table marks")
    return dict(zip(notes, CONCURRENT_MARKS))


def _span(values: list[float], digits: int = 1) -> str:
    low, high = (f"{v:.{digits}f}" for v in (min(values), max(values)))
    return low if low == high else f"{low}–{high}"


def _losses(points: list[dict[str, Any]]) -> str:
    """First → last training loss per GPU count: a NaN or a rise shows here, a spike in between does not."""
    parts = []
    for gpus in sorted({p["gpus"] for p in points}):
        group = [p for p in points if p["gpus"] == gpus]
        last = [p["last_loss"] for p in group]
        last_text = "NaN" if any(math.isnan(v) for v in last) else _span(last)
        parts.append(f"{gpus} GPU{'s' if gpus > 1 else ''} {_span([p['first_loss'] for p in group])} → {last_text}")
    return "Loss, first → last step: " + "; ".join(parts) + " (only these two per point are in the file). "


def _distinct(values: list[Any]) -> str:
    return " / ".join(str(v) for v in dict.fromkeys(values))


def _environments(envs: list[dict[str, Any]]) -> str:
    gpus = _distinct([e["gpu"] + (f" ({e['gpu_count']} visible)" if e.get("gpu_count") else "") for e in envs])
    dates = sorted(str(e.get("date")) for e in envs)
    when = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
    return (f"{gpus}, {when}; torch {_distinct([e.get('torch') for e in envs])}, Transformer Engine "
            f"{_distinct([e.get('transformer_engine') for e in envs])}")


def _machine(rep: Report, points: list[dict[str, Any]]) -> str:
    """The machine from each point's own environment; for points that record none, where it is named."""
    recorded = [p["environment"] for p in points if (p.get("environment") or {}).get("gpu")]
    if len(recorded) == len(points):
        return f"Machine, from each point's `environment`: {_environments(recorded)}. "
    if rep.path not in NOTED_IN_RUNS_README:
        raise DocsTableError(f"{rep.path}: {len(points) - len(recorded)} of {len(points)} points record no GPU "
                             "(their `environment`)")
    if rep.path not in DATES_NOT_IN_FILE:
        raise DocsTableError(f"{rep.path}: records no date (each point's `environment`)")
    merged_on = rep.data.get("environment")
    merging = (", and its `environment` block is the CPU machine that merged the points, not the one that "
               "ran them" if isinstance(merged_on, dict) and not merged_on.get("gpu") else "")
    some = (f"{len(recorded)} of {len(points)} points record {_environments(recorded)}; the other "
            f"{len(points) - len(recorded)} record" if recorded else "The file records")
    return (f"{some} no GPU, software or date: its points predate the runner recording them{merging}. "
            f"`{RUNS_README}` names {RUNS_README_NAMES} for these runs; the file was first committed on "
            f"{DATES_NOT_IN_FILE[rep.path]}. ")


def _timing(points: list[dict[str, Any]]) -> str:
    steps = " or ".join(str(n) for n in sorted({p["steps_timed"] for p in points}))
    warmups = {p.get("lr_warmup_steps") for p in points}
    warmup = ("the LR warm-up is not recorded in the points" if warmups == {None}
              else "LR warm-up " + " / ".join(f"{n:,} steps" if n is not None else "not recorded"
                                              for n in sorted(warmups, key=lambda n: (n is None, n))))
    return (f"One run per cell (one point file each, `points/`): tokens/s per GPU, each point's median over "
            f"the steps after its warm-up ({steps} timed steps); {warmup}. ")


def scaling_table(reports: list[Report], first_header: str, columns: tuple[Column, ...], memory: bool = False,
                  losses: bool = False) -> str:
    """One row per depth, precision and activation checkpointing of a scaling report, one column per
    layout; a point whose layout has no column is an error rather than a silently dropped measurement."""
    (rep,) = reports
    points = _points(rep)
    by_layout = {c.layout: c for c in columns}
    strays = sorted({p["layout"] for p in points} - set(by_layout))
    if strays:
        raise DocsTableError(f"{rep.path}: layout {', '.join(strays)} has no column in this table")
    marks = _concurrent_marks(rep, points)
    cells = {(_row_key(p), p["layout"]): p for p in points}
    keys = sorted(dict.fromkeys(_row_key(p) for p in points), key=lambda k: (k[0], k[2], k[1]))
    with_depth = len({k[0] for k in keys}) > 1
    rows = [[_row_label(key, with_depth)] + [_cell(cells.get((key, c.layout)), c, memory, marks) for c in columns]
            for key in keys]
    lines = table([first_header] + [c.header for c in columns], rows)
    shared = "; ".join(f"{mark} ran beside {note} on the same host" for note, mark in marks.items())
    footer = (_timing(points) + ("—: no point in the file. " if any(cell == "—" for row in rows for cell in row[1:])
                                 else "")
              + (f"{shared} (the points' `concurrent`). " if shared else "")
              + (_losses(points) if losses else "") + _machine(rep, points) + f"File: `{rep.path}`.")
    return "\n".join(lines + ["", footer]) + "\n"


TABLES: dict[str, Table] = {
    "scaling-2gpu": Table((TWO_GPU,), functools.partial(
        scaling_table, first_header="precision", losses=True, columns=(
            Column("1 GPU, single-device strategy", "single-device", efficiency=False),
            Column("1 GPU, EP strategy 1x1", "dp1xep1", efficiency=False),
            Column("2 GPUs, EP=2", "dp1xep2"), Column("2 GPUs, DP=2", "dp2xep1")))),
    "scaling-4gpu": Table((FOUR_GPU,), functools.partial(
        scaling_table, first_header="depth, precision", memory=True, columns=(
            Column("1 GPU", "dp1xep1", efficiency=False), Column("2 GPUs, EP=2", "dp1xep2"),
            Column("4 GPUs, EP=4", "dp1xep4"), Column("4 GPUs, dp2×ep2", "dp2xep2")))),
}
