"""torch.profiler breakdown of a few training steps: where the time goes, kernel by kernel."""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from biomoe.bench.models import Contender


def profile_steps(contender: Contender, ids: torch.Tensor, labels: torch.Tensor, steps: int = 3,
                  row_limit: int = 25) -> str:
    """Table of the ops with the most device time over ``steps`` steps (after one warm-up step)."""
    params = [p for p in contender.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4, fused=contender.fused_adam or None)

    def step() -> None:
        loss = contender.loss_fn(ids, labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=row_limit, max_name_column_width=60)
    return f"=== profile: {contender.name} ({steps} steps) ===\n{table}"
