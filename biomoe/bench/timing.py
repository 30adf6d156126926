"""Train-step timing with CUDA events after warm-up, medians over steps, peak memory."""

from __future__ import annotations

import gc
import statistics
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

from biomoe.bench.models import Contender
from biomoe.bench.shapes import BenchShape

PEAK_BF16_TFLOPS = 790.0  # dense bf16 matmul rate measured on the H200 used for these runs


@dataclass
class StepStats:
    variant: str
    shape: str
    seq: int
    micro_batch: int
    steps: int
    median_ms: float
    tokens_per_s: float
    tflops: float
    mfu: float
    peak_mem_gb: float
    final_loss: float
    status: str = "ok"
    losses: list[float] = field(default_factory=list)
    """Training loss at every step, warm-up included (same batch each step, so it should fall)."""

    def as_dict(self) -> dict:
        return asdict(self)


def free_memory() -> None:
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def make_train_step(contender: Contender, ids: torch.Tensor, labels: torch.Tensor,
                    lr: float = 1e-4) -> Callable[[], torch.Tensor]:
    """One full training step (forward, backward, AdamW step, zero_grad); returns the loss.

    Timing and profiling both call this, so they measure the same work."""
    params = [p for p in contender.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, fused=contender.fused_adam or None)

    def step() -> torch.Tensor:
        loss = contender.loss_fn(ids, labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return step


def time_training(contender: Contender, shape: BenchShape, ids: torch.Tensor, labels: torch.Tensor,
                  warmup: int, steps: int, lr: float = 1e-4) -> StepStats:
    """Full training steps, each bracketed by CUDA events."""
    train_step = make_train_step(contender, ids, labels, lr)
    times: list = []
    losses: list[torch.Tensor] = []  # kept on the GPU until the end: no host sync inside the loop
    for step in range(warmup + steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = train_step()
        end.record()
        losses.append(loss.detach())
        if step >= warmup:
            times.append((start, end))
    torch.cuda.synchronize()
    loss_values = [float(v) for v in losses]
    elapsed = [s.elapsed_time(e) for s, e in times]
    median_ms = statistics.median(elapsed)
    tokens_per_s = shape.tokens_per_step / (median_ms / 1e3)
    tflops = shape.flops_per_step() / (median_ms / 1e3) / 1e12
    del train_step
    return StepStats(contender.name, shape.name, shape.seq, shape.micro_batch, steps, median_ms,
                     tokens_per_s, tflops, tflops / PEAK_BF16_TFLOPS,
                     torch.cuda.max_memory_allocated() / 2**30, loss_values[-1], losses=loss_values)
