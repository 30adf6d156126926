"""Gradient clipping when parameters live on several device meshes.

``torch.nn.utils.clip_grad_norm_`` stacks per-parameter norms, which fails for DTensors on
different meshes (dense params on the data mesh, experts on the (dp, ep) mesh). Here each rank
sums the squares of its local shards, weights each parameter by how many ranks hold an identical
copy of that shard, and one all-reduce over the world gives the exact global norm for any layout.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.tensor import DTensor, Shard

from biomoe.compat.torch import foreach_mul_, foreach_norm


def _local_and_copies(grad: Tensor, world: int) -> tuple[Tensor, float]:
    """This rank's piece of ``grad`` and the number of world ranks that hold the same piece."""
    if isinstance(grad, DTensor):
        shards = 1
        for size, placement in zip(grad.device_mesh.shape, grad.placements):
            if isinstance(placement, Shard) or type(placement).__name__ == "_StridedShard":
                shards *= size
        return grad.to_local(), world / shards
    return grad, float(world)  # a plain tensor is replicated on every rank


def _by_device_and_dtype(tensors: list[Tensor], *also: list) -> dict[tuple, list[int]]:
    """Indices of ``tensors`` grouped so that each group can go through one foreach kernel
    (keyed by device, dtype and the matching entries of any lists in ``also``)."""
    groups: dict[tuple, list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.device, t.dtype, *(values[i] for values in also)), []).append(i)
    return groups


@torch.no_grad()
def global_grad_norm(parameters: Iterable[Tensor], group: dist.ProcessGroup | None = None) -> Tensor:
    """L2 norm of all gradients across every mesh (fp32, on the gradients' device).

    Per-shard norms come from ``torch._foreach_norm`` (:mod:`biomoe.compat.torch`) (a few fused kernels, as
    ``torch.nn.utils.clip_grad_norm_`` does); the per-parameter ``pow(2).sum()`` loop it replaces
    was a large share of the step's CUDA time on a 2-layer Mixtral shape (figures, machine and
    command: docs/benchmarks.md, "Figures behind decisions in the code")."""
    grads = [p.grad for p in parameters if p.grad is not None]
    world = dist.get_world_size(group) if dist.is_initialized() else 1
    if not grads:
        return torch.zeros(())
    pieces = [_local_and_copies(grad, world) for grad in grads]
    locals_ = [local.detach() for local, _ in pieces]
    device = locals_[0].device
    total = torch.zeros((), dtype=torch.float32, device=device)
    # One group per (device, dtype, copies): the weight is a Python number, so no tensor is built
    # from host data every step (a host-to-device copy that would make the host wait for the GPU).
    for (_, _, copies), idx in _by_device_and_dtype(locals_, [c for _, c in pieces]).items():
        norms = foreach_norm([locals_[i] for i in idx], 2.0)
        total = total + (torch.stack([n.to(device) for n in norms]) ** 2).sum() / copies
    if world > 1:
        dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group)
    return total.sqrt()


@torch.no_grad()
def clip_grad_norm_(parameters: Iterable[Tensor], max_norm: float,
                    group: dist.ProcessGroup | None = None) -> Tensor:
    """Scale gradients in place so their global L2 norm is at most ``max_norm``; returns the norm."""
    params = [p for p in parameters if p.grad is not None]
    norm = global_grad_norm(params, group)
    if not math.isfinite(max_norm) or not params:
        return norm
    coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    locals_ = [p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad for p in params]
    for (dev, _), idx in _by_device_and_dtype(locals_).items():
        foreach_mul_([locals_[i] for i in idx], coef.to(dev))
    return norm


@torch.no_grad()
def clip_grad_value_(parameters: Iterable[Tensor], clip_value: float) -> None:
    """Element-wise clamp; local shards suffice (no communication)."""
    for p in parameters:
        if p.grad is not None:
            local = p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
            local.clamp_(-clip_value, clip_value)
