"""Step timing shared by every contender: marks at each step's start, medians over steady state.

A step's time is the interval from its start mark to the next step's start mark (the last
measured step is closed by one extra step). Start-to-start intervals include everything between
two steps — the data loader, Lightning's hooks and callbacks, logging — which is what a user's
throughput is made of; the bare loops have nothing in between, so for them it equals the time
from the step's start to its end. On a GPU the marks are CUDA events recorded on the current
stream (no host synchronisation while timing); on a CPU (tests) they are host clock readings.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch

from bench.models import Contender
from bench.shapes import BenchShape
from biomoe.training.step.cuda_graph import GraphedStep

PEAK_BF16_TFLOPS = 790.0
"""Dense bf16 matmul rate measured on the H200 these runs use; MFU of every precision is against it."""

DATASHEET_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "B200": 2250.0, "A100": 312.0}
"""Dense bf16 tensor-core peak per GPU name fragment (datasheet, without sparsity): the MFU
denominator of runs on whichever GPU they land on, where :data:`PEAK_BF16_TFLOPS` is one card's
measured rate."""


def datasheet_peak_tflops(gpu_name: str) -> float | None:
    """:data:`DATASHEET_BF16_TFLOPS` of the GPU ``gpu_name`` names (None for one not listed)."""
    return next((v for k, v in DATASHEET_BF16_TFLOPS.items() if k in gpu_name), None)


class StepClock:
    """Start and end marks per step; :meth:`step_ms` turns them into per-step times.

    :meth:`drained_start` / :meth:`drained_end` time the host alone on one untimed step: in steady
    state a host that runs ahead fills the launch queue and then waits inside launches, so host
    time per step equals the step time whichever side is the limit. Started with the device
    drained, a step's host time is how long the Python thread needs to issue it: close to the step
    time, the step is bound by the host; well below it, by the GPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.starts: list = []
        self.ends: list = []
        self.host_ms: float | None = None
        """Host time of the drained step (:meth:`drained_start` to :meth:`drained_end`)."""
        self._drained_at: float | None = None

    def _mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def start(self) -> None:
        self.starts.append(self._mark())

    def end(self) -> None:
        self.ends.append(self._mark())

    def drained_start(self) -> None:
        """Wait for the device (the previous steps' marks are already recorded), then start the host clock."""
        if self.cuda:
            torch.cuda.synchronize()
        self._drained_at = time.perf_counter()

    def drained_end(self) -> None:
        if self._drained_at is not None:
            self.host_ms = (time.perf_counter() - self._drained_at) * 1e3
            self._drained_at = None

    def _elapsed_ms(self, a, b) -> float:
        return a.elapsed_time(b) if self.cuda else (b - a) * 1e3

    def step_ms(self, warmup: int, steps: int) -> list[float]:
        """Start-to-start times of steps ``warmup .. warmup + steps - 1`` (synchronises once)."""
        if self.cuda:
            torch.cuda.synchronize()
        out = []
        for i in range(warmup, min(warmup + steps, len(self.starts))):
            if i + 1 < len(self.starts):
                out.append(self._elapsed_ms(self.starts[i], self.starts[i + 1]))
            elif i < len(self.ends):
                out.append(self._elapsed_ms(self.starts[i], self.ends[i]))
        return out

    def busy_ms(self, warmup: int, steps: int) -> list[float]:
        """Start-to-end times of the same steps: the step alone, without what runs between steps."""
        if self.cuda:
            torch.cuda.synchronize()
        last = min(warmup + steps, len(self.starts), len(self.ends))
        return [self._elapsed_ms(self.starts[i], self.ends[i]) for i in range(warmup, last)]


class KernelCounter:
    """GPU kernels launched between :meth:`start` and :meth:`stop` (torch.profiler, CUDA activity
    only); ``None`` on a CPU. Used on a step that is not timed: the profiler slows the host."""

    def __init__(self, device: torch.device) -> None:
        self.enabled = device.type == "cuda"
        self._profiler = None
        self.kernels: int | None = None

    def start(self) -> None:
        if self.enabled and self._profiler is None and self.kernels is None:
            from torch.profiler import ProfilerActivity, profile

            self._profiler = profile(activities=[ProfilerActivity.CUDA])
            self._profiler.__enter__()

    def stop(self) -> None:
        if self._profiler is None:
            return
        torch.cuda.synchronize()
        profiler, self._profiler = self._profiler, None
        profiler.__exit__(None, None, None)
        try:
            self.kernels = sum(1 for e in profiler.events() if e.device_type == torch.autograd.DeviceType.CUDA
                               and not e.name.startswith(("Memcpy", "Memset")))
        except Exception:  # a profiler that cannot run here leaves the count out, never the row
            self.kernels = None


@dataclass
class Throughput:
    """Median step time and what follows from it for one shape."""

    step_ms: float
    tokens_per_s: float
    tflops: float
    mfu: float


def throughput(shape: BenchShape, step_ms: list[float]) -> Throughput:
    """Median of ``step_ms``; model TFLOP/s from :meth:`BenchShape.flops_per_step`."""
    if not step_ms:
        raise ValueError("no timed steps")
    median_ms = statistics.median(step_ms)
    seconds = median_ms / 1e3
    tflops = shape.flops_per_step() / seconds / 1e12
    return Throughput(median_ms, shape.tokens_per_step / seconds, tflops, tflops / PEAK_BF16_TFLOPS)


def free_memory(device: torch.device) -> None:
    """Drop what the previous row left (compiled graphs, cycles, cached blocks) and reset the peak."""
    torch.compiler.reset()  # compiled code holds the previous row's modules and their weights
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    reset_te_state()


def reset_te_state() -> None:
    """Forget Transformer Engine's global FP8 bookkeeping (amax buffers of the previous model)."""
    module = sys.modules.get("transformer_engine.pytorch.quantization") or sys.modules.get(
        "transformer_engine.pytorch.fp8")
    manager = getattr(module, "FP8GlobalStateManager", None)
    reset = getattr(manager, "reset", None)
    if callable(reset):
        try:
            reset()
        except Exception:  # bookkeeping only: a TE without it keeps its state, nothing breaks
            pass


def peak_memory_gb(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None


def make_train_step(contender: Contender, ids: torch.Tensor, labels: torch.Tensor,
                    lr: float = 1e-4, graphed: bool = False, eager_steps: int = 3) -> Callable[[], torch.Tensor]:
    """One full training step (forward, backward, AdamW step, zero_grad); returns the loss.
    ``graphed``: the whole step replayed as one CUDA graph (:class:`~biomoe.training.step.cuda_graph.GraphedStep`,
    with a capturable AdamW) after ``eager_steps`` eager steps; the next one is captured.

    Timing and profiling both call this, so they measure the same work."""
    params = [p for p in contender.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, fused=contender.fused_adam or None, capturable=graphed)
    if graphed:
        def update(batch: dict[str, torch.Tensor]) -> torch.Tensor:
            loss = contender.loss_fn(batch["input_ids"], batch["labels"])
            loss.backward()
            optimizer.step()
            return loss

        replayed = GraphedStep(update, optimizer, ids.device, warmup_steps=eager_steps)
        batch = {"input_ids": ids, "labels": labels}
        return lambda: replayed(batch)

    def step() -> torch.Tensor:
        loss = contender.loss_fn(ids, labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return step


@dataclass
class LoopTiming:
    step_ms: list[float]
    losses: list[float]
    host_ms: float | None = None
    kernels_per_step: int | None = None


def time_training(contender: Contender, ids: torch.Tensor, labels: torch.Tensor, warmup: int,
                  steps: int, lr: float = 1e-4, graphed: bool = False) -> LoopTiming:
    """``warmup + steps + 2`` full training steps with a mark at each start: then one step (it
    closes the last timed one) whose host time is taken with the device drained, and one whose
    kernels are counted. Losses stay on the device until the end: no sync in the timed steps."""
    # a graphed step is captured inside the warm-up, so every timed step is a replay
    train_step = make_train_step(contender, ids, labels, lr, graphed, eager_steps=max(1, min(3, warmup - 1)))
    clock = StepClock(ids.device)
    kernels = KernelCounter(ids.device)
    losses: list[torch.Tensor] = []
    total = warmup + steps + 2
    for index in range(total):
        clock.start()
        if index == total - 2:
            clock.drained_start()
        if index == total - 1:
            kernels.start()
        losses.append(train_step().detach())
        if index == total - 2:
            clock.drained_end()
        clock.end()
    kernels.stop()
    step_ms = clock.step_ms(warmup, steps)
    return LoopTiming(step_ms, [float(v) for v in losses], clock.host_ms, kernels.kernels)
