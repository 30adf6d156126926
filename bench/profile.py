"""torch.profiler breakdown of a few training steps: where the time goes, kernel by kernel."""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from bench.models import Contender
from bench.timing import make_train_step


def profile_steps(contender: Contender, ids: torch.Tensor, labels: torch.Tensor, steps: int = 3,
                  row_limit: int = 25) -> str:
    """Table of the ops with the most device time over ``steps`` steps (after one warm-up step)."""
    step = make_train_step(contender, ids, labels)
    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=row_limit, max_name_column_width=60)
    return f"=== profile: {contender.name} ({steps} steps) ===\n{table}"
