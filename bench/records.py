"""One benchmark row: what ran (shape, tokens per step, contender, precision) and what it measured.

Kept free of CUDA so the table logic (ratios, filters, the JSON layout) is testable on a CPU.
"""

from __future__ import annotations

import fnmatch
import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from bench.shapes import BenchShape

BASELINE = "hf-bf16-fused"
"""The row every shape runs first, and the reference of ``ratio_vs_hf_bf16_fused``: HF Mixtral in
pure bf16 with grouped_mm experts and torch's fused AdamW."""
HF_STRONGEST = ("hf-bf16-fused", "hf-bf16-fused-compile", "hf-eager", "hf-eager-compile")
"""HF's configurations a user would try for speed (grouped_mm or eager experts, each with and without
``torch.compile``, pure bf16, fused AdamW): the fastest of those measured in a run is each shape's
baseline (``fastest_hf``, ``ratio_vs_fastest_hf``), because which one wins depends on the shape."""


@dataclass(frozen=True)
class Row:
    """A row to run: one contender at one precision on one shape."""

    shape: BenchShape
    contender: str
    precision: str

    @property
    def id(self) -> str:
        """``case/contender/precision``, what ``--rows`` patterns match, e.g.
        ``mixtral-2layer@16384/biomoe-cli/fp8-block``."""
        return f"{self.shape.case}/{self.contender}/{self.precision}"


@dataclass
class BenchRecord:
    """One row of ``bench.json``. ``status`` is ``ok``, ``skipped`` (with ``error`` saying why),
    ``oom`` or ``error`` (with the exception's message): a failing row never ends the sweep."""

    shape: str
    tokens_per_step: int
    seq: int
    micro_batch: int
    contender: str
    precision: str
    status: str = "ok"
    error: str | None = None
    tokens_per_s: float | None = None
    step_ms: float | None = None
    """Median start-to-start time of the timed steps (what ``tokens_per_s`` is computed from)."""
    mean_step_ms: float | None = None
    """Mean of the same steps: unlike the median it carries the occasional logging/checking step."""
    busy_ms: float | None = None
    """Median start-to-end time of the same steps: without what runs between two steps."""
    host_ms: float | None = None
    """Host time of one untimed step started with the device drained: how long the Python thread
    needs to issue a step. Close to ``step_ms``: the step is bound by the host; well below: by the GPU."""
    kernels_per_step: int | None = None
    """GPU kernels of one (untimed) step after the timed ones, counted by torch.profiler."""
    tflops: float | None = None
    """Model TFLOP/s: the ``flop_formula`` of the report over the median step time."""
    mfu: float | None = None
    peak_mem_gb: float | None = None
    ratio_vs_hf_bf16_fused: float | None = None
    fastest_hf: str | None = None
    """The fastest of :data:`HF_STRONGEST` measured on this shape in the same run: the baseline."""
    ratio_vs_fastest_hf: float | None = None
    steps_timed: int = 0
    warmup_steps: int = 0
    losses: list[float] = field(default_factory=list)
    """Training loss at every step, warm-up included (the same batch each step, so it falls)."""
    wall_s: float | None = None
    """The whole row: building the model or Trainer, warm-up, timed steps, tear-down."""
    details: dict[str, Any] = field(default_factory=dict)
    """How the contender ran: optimizer, weights, expert kernels, config, callbacks, ..."""
    runs: list[float] = field(default_factory=list)
    """tokens/s of every run of this row, in the order they ran (the bench interleaves the runs of
    a shape's rows, A B C A B C ...); ``tokens_per_s`` is their median, the other timings are the
    median run's."""
    tokens_per_s_range: list[float] | None = None
    """[slowest, fastest] of :attr:`runs`."""

    @classmethod
    def for_row(cls, row: Row, **kwargs: Any) -> "BenchRecord":
        s = row.shape
        return cls(shape=s.name, tokens_per_step=s.tokens_per_step, seq=s.seq, micro_batch=s.micro_batch,
                   contender=row.contender, precision=row.precision, **kwargs)

    @property
    def case(self) -> str:
        return f"{self.shape}@{self.tokens_per_step}"

    @property
    def id(self) -> str:
        return f"{self.case}/{self.contender}/{self.precision}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def combine_runs(runs: list[BenchRecord]) -> BenchRecord:
    """One record for a row run several times: the median run's timings and losses, every run's
    tokens/s in :attr:`BenchRecord.runs`, the highest peak memory, the summed wall time. Runs that
    failed are listed in ``details["failed_runs"]``; if none succeeded the first failure stands."""
    if not runs:
        raise ValueError("combine_runs needs at least one run")
    ok = [r for r in runs if r.status == "ok" and r.tokens_per_s is not None]
    failed = [f"{r.status}: {r.error}" for r in runs if r not in ok]
    if not ok:
        return runs[0]
    by_speed = sorted(ok, key=lambda r: r.tokens_per_s)
    chosen = by_speed[(len(by_speed) - 1) // 2]
    speeds = [r.tokens_per_s for r in ok]
    median = statistics.median(speeds)
    combined = replace(chosen, runs=speeds, tokens_per_s=median,
                       tokens_per_s_range=[min(speeds), max(speeds)],
                       details=dict(chosen.details))
    if chosen.tflops is not None and chosen.tokens_per_s:
        combined.tflops = chosen.tflops * median / chosen.tokens_per_s
        combined.mfu = None if chosen.mfu is None else chosen.mfu * median / chosen.tokens_per_s
    peaks = [r.peak_mem_gb for r in runs if r.peak_mem_gb is not None]
    combined.peak_mem_gb = max(peaks) if peaks else None
    walls = [r.wall_s for r in runs if r.wall_s is not None]
    combined.wall_s = sum(walls) if walls else None
    if failed:
        combined.details["failed_runs"] = failed
    return combined


def fastest_hf(records: list[BenchRecord]) -> dict[str, BenchRecord]:
    """Each case's fastest measured row among :data:`HF_STRONGEST` (by median tokens/s)."""
    best: dict[str, BenchRecord] = {}
    for r in records:
        if r.contender in HF_STRONGEST and r.status == "ok" and r.tokens_per_s:
            if r.case not in best or r.tokens_per_s > best[r.case].tokens_per_s:
                best[r.case] = r
    return best


def fill_ratios(records: list[BenchRecord]) -> None:
    """Set ``ratio_vs_hf_bf16_fused`` and ``ratio_vs_fastest_hf`` (with ``fastest_hf``, the winner's
    name) of every measured row whose case has the reference measured."""
    baselines = {r.case: r.tokens_per_s for r in records
                 if r.contender == BASELINE and r.status == "ok" and r.tokens_per_s}
    strongest = fastest_hf(records)
    for record in records:
        base = baselines.get(record.case)
        ok = record.status == "ok" and record.tokens_per_s is not None
        record.ratio_vs_hf_bf16_fused = record.tokens_per_s / base if ok and base else None
        winner = strongest.get(record.case)
        record.fastest_hf = winner.contender if winner else None
        record.ratio_vs_fastest_hf = record.tokens_per_s / winner.tokens_per_s if ok and winner else None


def select_rows(rows: list[Row], patterns: list[str]) -> list[Row]:
    """Rows whose id matches any glob in ``patterns`` (all rows without patterns), plus the baseline
    rows (every planned one of :data:`HF_STRONGEST`) of each case that keeps a row, so that each kept
    row has its ratios."""
    if not patterns:
        return list(rows)
    chosen = {row.id for row in rows if any(fnmatch.fnmatchcase(row.id, p) for p in patterns)}
    cases = {row.shape.case for row in rows if row.id in chosen}
    chosen |= {row.id for row in rows if row.contender in HF_STRONGEST and row.shape.case in cases}
    return [row for row in rows if row.id in chosen]
