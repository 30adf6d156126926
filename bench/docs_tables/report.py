"""A results file as the tables read it: its records, date and machine; one-line errors."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bench.records import BenchRecord

ROOT = Path(__file__).resolve().parents[2]
"""The repository: documents and results files are named relative to it."""

DATES_NOT_IN_FILE = {
    "results/bench/bench.json": "2026-12-01",
    "results/bench/recipes-all-shapes/bench.json": "2026-12-03",
    "results/bench/sweep/small-shapes.json": "2026-12-03",
    "results/bench/sweep/mixtral.json": "2026-12-03",
    "results/experts/speed/speed.json": "2026-12-06 to 2026-12-07",
    "results/bench/inference-gpu/score-embed.json": "2026-12-06",
    "results/bench/inference-gpu/variants-generate.json": "2026-12-06",
    "results/experts/speed-quack/speed.json": "2026-12-07",
    "results/bench/bare-loop/bench.json": "2026-11-29",
    "results/bench/compile/bench.json": "2026-11-29",
    "results/quality/markov_ecoli536.json": "2026-11-29",
    "results/quality/repeats/heldout_markov7.json": "2026-11-29",
    "results/quality/repeats/heldout_markov7_copies.json": "2026-11-29",
    "results/experts/summary.json": "2026-12-06",
    "results/experts/study/summary.json": "2026-12-06",
    "results/experts/study/mutations-dense.json": "2026-12-06",
    "results/experts/study/mutations-moe.json": "2026-12-06",
    "results/experts/study/mutations-fine.json": "2026-12-06",
    "results/bench/inference/genome-score.json": "2026-12-02",
    "results/bench/inference/genome-generate.json": "2026-12-02",
    "results/bench/inference/dna-small-score.json": "2026-12-02",
    "results/bench/inference/dna-small-more.json": "2026-12-04",
    "results/recipes/summary.json": "2026-12-01",
    "results/corpus/packing-fill.json": "2026-12-06",
    "results/scaling/mixtral-2gpu-config-warmup/scaling.json": "2026-11-29",
    "results/scaling/mixtral-4gpu/scaling.json": "2026-11-29",
    "results/bench/optimizer-storage/bench.json": "2026-12-03",
    "results/bench/compiled-adamw/mixtral-16k.json": "2026-12-04",
    "results/bench/compiled-adamw/mixtral-4k.json": "2026-12-04",
    "results/bench/compiled-adamw/optimizer-step.json": "2026-12-04",
    "results/scaling/mixtral-1gpu-strategy-overhead/without-fsdp-at-one-gpu/scaling.json": "2026-12-01",
}
"""Reports written before the bench recorded the date: the day of the commit that first added each
one, which the rendered footer says. A report that records ``environment.date`` is read instead."""


class DocsTableError(Exception):
    """A results file or a marked table that cannot be rendered: one line naming it."""


@dataclass(frozen=True)
class Report:
    path: str
    data: dict[str, Any]

    @property
    def records(self) -> list[BenchRecord]:
        if not isinstance(self.data.get("records"), list):
            raise DocsTableError(f"{self.path}: not a bench report (no 'records' list)")
        return [BenchRecord(**r) for r in self.data["records"]]

    @property
    def date(self) -> str:
        recorded = self.data.get("environment", {}).get("date") or str(self.data.get("date", ""))[:10]
        if recorded:
            return recorded
        if self.path not in DATES_NOT_IN_FILE:
            raise DocsTableError(f"{self.path}: records no date (environment.date)")
        return DATES_NOT_IN_FILE[self.path]

    def field(self, *keys: str | int) -> Any:
        """``data[k1][k2]...`` (names or list positions), or one line naming the file and the path of
        keys up to the first one that is missing."""
        value: Any = self.data
        for depth, key in enumerate(keys):
            try:
                value = value[key]
            except (KeyError, IndexError, TypeError):
                raise DocsTableError(f"{self.path}: no '{'.'.join(map(str, keys[:depth + 1]))}'") from None
        return value

    def gpu(self) -> str:
        gpu = self.data.get("environment", {}).get("gpu") or self.data.get("machine")
        if not gpu:
            raise DocsTableError(f"{self.path}: records no GPU (environment.gpu or machine)")
        return gpu

    def machine(self) -> str:
        env = self.data.get("environment", {})
        if not env.get("gpu"):
            raise DocsTableError(f"{self.path}: records no GPU (environment.gpu)")
        return (f"one {env['gpu']}, {self.date}; torch {env.get('torch')}, Transformer Engine "
                f"{env.get('transformer_engine')}, transformers {env.get('transformers')}")


def read_report(path: str, root: Path = ROOT) -> Report:
    file = root / path
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        raise DocsTableError(f"{path}: no such results file") from None
    except json.JSONDecodeError as err:
        raise DocsTableError(f"{path}: not JSON ({err.msg}, line {err.lineno})") from None
    if not isinstance(data, dict):
        raise DocsTableError(f"{path}: not a JSON object")
    return Report(path, data)



@dataclass(frozen=True)
class Table:
    """A marked table: the results files it reads and how it renders them."""

    sources: tuple[str, ...]
    render: Callable[[list[Report]], str]

