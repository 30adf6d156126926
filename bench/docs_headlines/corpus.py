"""docs/corpus.md's headline figures: what the DataLoader delivers against what a GPU trains."""

from __future__ import annotations

from typing import Any

from bench.docs_headlines.core import Headline

DOC = "docs/corpus.md"
TOKENS_PER_BATCH = 64 * 1024
"""configs/corpus-study.yaml's batch, the shape the loader was timed at."""


def _loader_rates(data: Any) -> str:
    rates = data["batches_per_s"]
    return f"{rates['store']['median']:.0f} batches/s from the store and {rates['fasta']['median']:.0f} from the"


def _training_batches(data: Any) -> str:
    """The recipe's MoE as shipped (compiled, so torch's layer kernels), alone on the GPU."""
    row = next(c for c in data["contenders"] if (c["size"], c["variant"], c["kernels"]) == ("base", "moe", "torch"))
    return f"at {row['tokens_per_s'] / TOKENS_PER_BATCH:.0f} such batches/s"


HEADLINES = (
    Headline(DOC, "delivers 98 batches/s from the store and 123 from the", "results/corpus/loader-store-vs-fasta.json",
             _loader_rates),
    Headline(DOC, "that recipe's MoE at 15 such batches/s", "results/experts/speed/speed.json", _training_batches),
)
