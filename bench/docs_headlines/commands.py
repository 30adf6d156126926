"""docs/commands.md's headline figure: what Transformer Engine's layers cost a use command's process."""

from __future__ import annotations

import statistics
from typing import Any

from bench.docs_headlines.core import Headline


def _warm_seconds(data: Any, task: str, contender: str) -> float:
    row = next(r for r in data["records"] if (r["task"], r["contender"], r["status"]) == (task, contender, "ok"))
    return statistics.median(run["seconds"] for run in row["runs"])


def _te_start_up(data: Any) -> str:
    """TE's layer kernels against torch's, a warm fresh process each, the median over the report's jobs."""
    tasks = dict.fromkeys(r["task"] for r in data["records"])
    extra = [_warm_seconds(data, t, "biomoe-te") - _warm_seconds(data, t, "biomoe-torch") for t in tasks]
    return f"about {statistics.median(extra):.0f} s"


HEADLINES = (
    Headline("docs/commands.md", "cost about 8 s a process to import and warm up",
             "results/bench/inference-gpu/score-embed.json", _te_start_up),
)
