"""A whole training step — forward, backward and optimizer update — replayed as one CUDA graph.

A small model's step is a thousand-odd short kernels, each launched from Python: the device then
waits on the host, and the step takes the host's time. Replaying a captured CUDA graph launches
all of them with one call, so the step takes the device's time instead.

Capture asks three things of the step:

* it never waits for the device: no ``.item()``, no ``bool()`` of a device tensor, no split sizes
  read back to the host. biomoe's torch kernels qualify (tests/gpu/test_no_host_sync.py checks
  them); Transformer Engine's grouped GEMMs do not: they take each expert's token count on the host.
* fixed shapes and addresses: each batch is copied into the graph's own input buffers, and the
  gradients live in the graph's memory pool (allocated by the captured backward, overwritten by
  every replay);
* an optimizer whose update is captured with it: torch's AdamW with ``capturable=True`` (its step
  counts on the device) or the fused :class:`~biomoe.training.optimization.master_adamw.AdamWWithMasterWeights`. A
  learning rate that changes during training must be a device tensor updated in place
  (:func:`set_learning_rates`), since a Python float is baked into the graph.

Before capture the step runs eagerly a few times on a side stream (as torch's documentation asks:
it lets the optimizer create its state and the libraries pick their workspaces), so the first
steps are real, uncaptured training steps. Without CUDA the same object runs every step eagerly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor

__all__ = ["GraphedStep", "set_learning_rates"]


class GraphedStep:
    """Calls ``step(batch)`` — which runs forward, backward and the optimizer update and returns
    the loss — eagerly for ``warmup_steps`` calls, then captures it once and replays it.

    Gradients are set to ``None`` before every eager step and before capture, so ``step`` must
    not accumulate over calls. The returned loss is a copy: the graph's own output is overwritten
    by the next replay.
    """

    def __init__(self, step: Callable[[dict[str, Tensor]], Tensor], optimizer: torch.optim.Optimizer,
                 device: torch.device, warmup_steps: int = 3) -> None:
        if warmup_steps < 1:
            raise ValueError("warmup_steps must be at least 1: the optimizer creates its state before capture")
        self.step = step
        self.optimizer = optimizer
        self.capture = device.type == "cuda"
        self.warmup_steps = warmup_steps
        self.eager_steps = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self._inputs: dict[str, Tensor] | None = None
        self._loss: Tensor | None = None
        self._side = torch.cuda.Stream(device) if self.capture else None

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def __call__(self, batch: Mapping[str, Tensor]) -> Tensor:
        if not self.capture:
            self.optimizer.zero_grad(set_to_none=True)
            return self.step(dict(batch))
        self._copy_in(batch)
        if self.graph is None and self.eager_steps < self.warmup_steps:
            return self._eager_on_side_stream()
        if self.graph is None:
            self.optimizer.zero_grad(set_to_none=True)  # the captured backward allocates them in the pool
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self._loss = self.step(self._inputs).detach()
            self.graph = graph  # capture records the step without running it: the replay below does
        self.graph.replay()
        return self._loss.clone()

    def _copy_in(self, batch: Mapping[str, Tensor]) -> None:
        if self._inputs is None:
            self._inputs = {key: value.detach().clone() for key, value in batch.items()}
            return
        if batch.keys() != self._inputs.keys():
            raise ValueError(f"a captured training step takes the same batch keys every step: "
                             f"{sorted(self._inputs)}, got {sorted(batch)}")
        for key, value in batch.items():
            buffer = self._inputs[key]
            if value.shape != buffer.shape or value.dtype != buffer.dtype:
                raise ValueError(f"batch[{key!r}]: a captured training step takes the same shape and dtype "
                                 f"every step ({tuple(buffer.shape)} {buffer.dtype}, got "
                                 f"{tuple(value.shape)} {value.dtype})")
            buffer.copy_(value, non_blocking=True)

    def _eager_on_side_stream(self) -> Tensor:
        self.eager_steps += 1
        main = torch.cuda.current_stream()
        self._side.wait_stream(main)
        with torch.cuda.stream(self._side):
            self.optimizer.zero_grad(set_to_none=True)
            loss = self.step(self._inputs).detach()
        main.wait_stream(self._side)
        return loss.clone()


def set_learning_rates(optimizer: torch.optim.Optimizer, values: list[float]) -> None:
    """Write each group's learning rate in place: into its device tensor where it has one (what a
    captured update reads), else as a float."""
    for group, value in zip(optimizer.param_groups, values, strict=True):
        if isinstance(group["lr"], Tensor):
            group["lr"].fill_(value)
        else:
            group["lr"] = value
