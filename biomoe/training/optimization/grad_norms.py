"""The gradients' norms of one optimizer step, computed once and read by everyone who needs them.

Two things look at every gradient before each update: :class:`~biomoe.training.guards.health.NonFiniteGuard`
(is any gradient NaN or inf?) and gradient clipping (how large is the total norm?). Both are a
2-norm per gradient: a NaN or inf makes a tensor's norm non-finite, and the total norm is the root
of the sum of their squares. On a host-bound step each pass over the gradients is a few hundred
small kernels, so the norms are computed once per step (one multi-tensor kernel per device and
dtype), kept on the LightningModule, and dropped when the optimizer step is over.

Clipping then does not scale the gradients in a pass of its own where the optimizer can do it:
torch's fused Adam/AdamW divide each gradient by ``optimizer.grad_scale`` inside their update
kernel (the contract GradScaler uses to unscale), so the clip coefficient is handed over as
``grad_scale = max(1, norm / max_norm)``, which is ``clip_grad_norm_``'s scaling without a kernel
of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from biomoe.compat.torch import foreach_mul_, foreach_norm, step_supports_amp_scaling

__all__ = ["per_tensor_norms", "step_grad_norms", "step_total_grad_norm", "forget_step_grad_norms",
           "clip_grad_norm_shared", "drop_grad_scale"]

_ATTRIBUTE = "_biomoe_step_grad_norms"
CLIP_EPS = 1e-6
"""Added to the norm before dividing, as ``torch.nn.utils.clip_grad_norm_`` does."""


def per_tensor_norms(tensors: Sequence[Tensor]) -> Tensor | None:
    """fp32 vector of each tensor's 2-norm, on the first tensor's device; no host synchronisation.

    One multi-tensor norm per (device, dtype) group, accumulated in fp32. NaN and inf propagate into
    the norm; a finite tensor whose norm overflows fp32 (entries ~1e19 and more) reads as inf too,
    which is right for both readers: clipping could not scale it either."""
    if not tensors:
        return None
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for index, tensor in enumerate(tensors):
        groups.setdefault((tensor.device, tensor.dtype), []).append(index)
    norms: list[Tensor | None] = [None] * len(tensors)
    first = tensors[0].device
    for indices in groups.values():
        for i, value in zip(indices, foreach_norm([tensors[i].detach() for i in indices], 2.0)):
            norms[i] = value.to(first)
    return torch.stack(norms)


def _local(tensor: Tensor) -> Tensor:
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def _with_grads(params: Sequence[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    kept = [p for p in params if p.grad is not None]
    return kept, [p.grad for p in kept]


def step_grad_norms(module: Any, params: Sequence[Tensor]) -> Tensor | None:
    """The 2-norms of ``params``' gradients (their local shards), in the order of the parameters
    that have one, for this optimizer step: computed on the first call, then read from ``module``."""
    kept, grads = _with_grads(params)
    cached = getattr(module, _ATTRIBUTE, None)
    if cached is not None:
        order, seen, norms = cached
        if len(order) == len(kept) and all(a is b for a, b in zip(order, kept)) and \
                all(a is b for a, b in zip(seen, grads)):
            return norms
    norms = per_tensor_norms([_local(g) for g in grads])
    if norms is not None:
        setattr(module, _ATTRIBUTE, (kept, grads, norms))
    return norms


def step_total_grad_norm(module: Any, params: Sequence[Tensor]) -> Tensor | None:
    """The global 2-norm of ``params``' gradients: from this step's norms when they cover the same
    gradients (in whatever order), else computed (and kept) now."""
    kept, grads = _with_grads(params)
    cached = getattr(module, _ATTRIBUTE, None)
    if cached is not None:
        order, seen, norms = cached
        if {(id(p), id(g)) for p, g in zip(order, seen)} == {(id(p), id(g)) for p, g in zip(kept, grads)} \
                and len(order) == len(kept):
            return norms.square().sum().sqrt()
    norms = step_grad_norms(module, kept)
    return None if norms is None else norms.square().sum().sqrt()


def forget_step_grad_norms(module: Any) -> None:
    """After the update: the next step's gradients are new tensors with new norms."""
    if hasattr(module, _ATTRIBUTE):
        delattr(module, _ATTRIBUTE)


@torch.no_grad()
def clip_grad_norm_shared(module: Any, optimizer: torch.optim.Optimizer, params: Sequence[Tensor],
                          max_norm: float) -> Tensor | None:
    """``clip_grad_norm_(params, max_norm)`` from this step's shared norms; returns the total norm.

    An optimizer that divides gradients by ``grad_scale`` in its own kernel gets the coefficient
    that way (its update is then exactly that of clipped gradients); any other gets the gradients
    scaled here with one multi-tensor multiply per device and dtype. Only for gradients that are
    plain tensors: sharded ones need the strategy's reduction over ranks."""
    total = step_total_grad_norm(module, params)
    if total is None:
        return None
    if step_supports_amp_scaling(optimizer) and getattr(optimizer, "grad_scale", None) is None:
        optimizer.grad_scale = (total / max_norm + CLIP_EPS / max_norm).clamp(min=1.0).to(torch.float32)
        return total
    coef = (max_norm / (total + CLIP_EPS)).clamp(max=1.0)
    grads = [p.grad for p in params if p.grad is not None]
    groups: dict[tuple[torch.device, torch.dtype], list[Tensor]] = {}
    for grad in grads:
        groups.setdefault((grad.device, grad.dtype), []).append(grad)
    for (device, _), members in groups.items():
        foreach_mul_(members, coef.to(device))
    return total


def drop_grad_scale(optimizer: torch.optim.Optimizer) -> None:
    """After the update: a scale left on the optimizer would scale the next step's gradients."""
    if hasattr(optimizer, "grad_scale"):
        del optimizer.grad_scale
