"""The master-weight AdamW as one generated kernel per parameter (``model.optim.backend: compiled``).

The master-weight update is memory-bound: per parameter it reads the bf16 gradient, the fp32
master and both moments and writes them back with the bf16 weight, 28 bytes with fp32 state.
How close a kernel gets to the GPU's memory bandwidth decides its time. Timed alone over the
parameters of a 2-layer Mixtral (``python -m bench.optimizer_step``; figures in docs/benchmarks.md,
"The compiled master-weight AdamW"), this update, written once in plain torch ops and handed to
``torch.compile``, came closer to the bandwidth than Transformer Engine's ``FusedAdam``, and TE's
remainder and bf16-first-moment kernels were slower still. Inductor fuses the cast, both
moments, the bias corrections, weight decay, the step, the rounding to bf16 and, with
``master_storage: remainder``, the split of the master into weight and remainder into one kernel
per parameter; in a whole ``cli.py fit`` step remainders then cost nothing measurable.

The state is :class:`~biomoe.training.optimization.master_adamw.AdamWWithMasterWeights`' (same keys, dtypes and
checkpoints), and on a CPU the same update runs eagerly, so a run moves between the backends and
the CPU tests check the very function the GPU compiles. The learning rate, the step count, the
clip coefficient (``grad_scale``) and the skip flag (``found_inf``) are device tensors, so the
compiled kernels are reused at every step without recompiling or waiting for the device.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from biomoe.checkpoint.optimizer_state import join_bits, local_shard, split_bits
from biomoe.training.optimization.master_adamw import AdamWWithMasterWeights

log = logging.getLogger(__name__)

__all__ = ["CompiledAdamWWithMasterWeights", "master_adamw_update_"]


def master_adamw_update_(weights: Sequence[Tensor], grads: Sequence[Tensor], masters: Sequence[Tensor],
                         exp_avgs: Sequence[Tensor], exp_avg_sqs: Sequence[Tensor], steps: Sequence[Tensor],
                         lr: Tensor, grad_scale: Tensor, found_inf: Tensor, *, beta1: float, beta2: float,
                         eps: float, weight_decay: float) -> None:
    """One decoupled-weight-decay Adam step on fp32 masters, in place, for plain tensors.

    ``masters[i]`` is the fp32 master of ``weights[i]``, or its int16 remainder (the master is then
    joined from the weight and split again). Moments may be stored in bf16; everything is computed
    in fp32, in torch's AdamW order of operations. Gradients are divided by ``grad_scale`` (the
    clip coefficient); where ``found_inf`` is nonzero nothing changes, not even the step count."""
    skip = found_inf > 0
    for weight, grad, master, exp_avg, exp_avg_sq, step in zip(weights, grads, masters, exp_avgs, exp_avg_sqs,
                                                              steps):
        remainder = master.dtype == torch.int16
        full = join_bits(weight, master) if remainder else master
        g = grad.to(torch.float32) / grad_scale
        new_step = step + 1
        bias_correction1 = 1 - beta1 ** new_step
        bias_correction2_sqrt = (1 - beta2 ** new_step).sqrt()
        m = exp_avg.to(torch.float32).lerp(g, 1 - beta1)
        v = exp_avg_sq.to(torch.float32) * beta2 + (1 - beta2) * g * g
        decayed = full * (1 - lr * weight_decay)
        denom = v.sqrt() / bias_correction2_sqrt + eps
        updated = torch.where(skip, full, decayed - (lr / bias_correction1) * (m / denom))
        exp_avg.copy_(torch.where(skip, exp_avg, m.to(exp_avg.dtype)))
        exp_avg_sq.copy_(torch.where(skip, exp_avg_sq, v.to(exp_avg_sq.dtype)))
        step.copy_(torch.where(skip, step, new_step))
        if remainder:
            rounded, low = split_bits(updated)
            weight.copy_(rounded)
            master.copy_(low)
        else:
            master.copy_(updated)
            weight.copy_(updated)


class CompiledAdamWWithMasterWeights(AdamWWithMasterWeights):
    """:class:`~biomoe.training.optimization.master_adamw.AdamWWithMasterWeights` whose update is
    :func:`master_adamw_update_`, compiled by ``torch.compile`` on a CUDA device (eager elsewhere).

    Compilation happens at the first step, once per parameter group (logged), and again only if a
    group's tensors change shape or dtype. Sharded (DTensor) parameters are updated through their
    local shards: the update is elementwise."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, *, master_storage: str = "fp32",
                 moment_dtypes: tuple[torch.dtype, torch.dtype] = (torch.float32, torch.float32),
                 compile_update: bool | None = None) -> None:
        # fused=True: step counts live on the parameters' device and step() takes grad_scale/found_inf.
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=True,
                         master_storage=master_storage, moment_dtypes=moment_dtypes)
        self.compile_update = compile_update
        self._update: Callable[..., None] | None = None
        self._scalars: dict[torch.device, dict[str, Tensor]] = {}

    def _update_for(self, device: torch.device) -> Callable[..., None]:
        """The update function: compiled on CUDA unless told otherwise (decided at the first step)."""
        if self._update is None:
            wanted = self.compile_update if self.compile_update is not None else device.type == "cuda"
            if wanted:
                log.info("compiling the optimizer update (once per parameter group, at the first step)")
                self._update = torch.compile(master_adamw_update_, fullgraph=True, dynamic=False)
            else:
                self._update = master_adamw_update_
        return self._update

    def _scalar(self, device: torch.device, name: str, value: float | Tensor | None, default: float) -> Tensor:
        """A 0-d fp32 tensor on ``device`` holding ``value``, written in place (no new tensor, no
        host synchronisation; a tensor value is copied on the device)."""
        slots = self._scalars.setdefault(device, {})
        if name not in slots:
            slots[name] = torch.zeros((), dtype=torch.float32, device=device)
        slot = slots[name]
        if isinstance(value, Tensor):
            slot.copy_(value.reshape(()), non_blocking=True)
        else:
            slot.fill_(default if value is None else value)
        return slot

    def update_group(self, group: dict[str, Any], params: list[Tensor], states: list[dict[str, Tensor]]) -> None:
        device = local_shard(params[0].detach()).device
        beta1, beta2 = group["betas"]
        self._update_for(device)(
            [local_shard(p.detach()) for p in params], [local_shard(p.grad) for p in params],
            [local_shard(s["remainder"] if "remainder" in s else s["master"]) for s in states],
            [local_shard(s["exp_avg"]) for s in states], [local_shard(s["exp_avg_sq"]) for s in states],
            [s["step"] for s in states],
            self._scalar(device, "lr", group["lr"], math.nan),
            self._scalar(device, "grad_scale", getattr(self, "grad_scale", None), 1.0),
            self._scalar(device, "found_inf", getattr(self, "found_inf", None), 0.0),
            beta1=float(beta1), beta2=float(beta2), eps=float(group["eps"]),
            weight_decay=float(group["weight_decay"]))
