"""docs/mutations.md's headline figure: how rare stop-gains are among the sampled SNVs."""

from __future__ import annotations

from typing import Any

from bench.docs_headlines.core import Headline


def _stop_gain_share(data: Any) -> str:
    counts = [g["counts"] for g in data["genomes"].values()]
    share = sum(c["stop_gain"] for c in counts) / sum(sum(c.values()) for c in counts)
    return f"about {share:.0%}"


HEADLINES = (
    Headline("docs/mutations.md", "(stop-gains are about 5% of the SNVs)", "results/experts/mutations.json",
             _stop_gain_share),
)
