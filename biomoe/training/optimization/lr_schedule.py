"""The learning-rate schedule: a linear warm-up, then a cosine decay to a floor.

Two places build it: the LightningModule for the run's planned length, and
:class:`~biomoe.training.guards.time_budget.TimeBudget`, which sizes it again once it has turned a
wall-clock budget into a step count. One function keeps both on the same curve.
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["warmup_cosine"]


def warmup_cosine(warmup_steps: int, total_steps: int, min_ratio: float) -> Callable[[int], float]:
    """LR multiplier: linear warm-up to 1, then cosine decay to ``min_ratio`` at ``total_steps``."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / max(warmup_steps, 1)
        progress = min((step - warmup_steps) / max(total_steps - warmup_steps, 1), 1.0)
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor
