"""An all-to-all that autograd can differentiate.

The backward of an all-to-all is the all-to-all with input and output split sizes swapped. Our
own Function (rather than ``torch.distributed.nn``) keeps the split sizes as host integers
computed once per dispatch, and works the same on gloo (CPU tests) and NCCL.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor


def all_to_all_raw(x: Tensor, output_splits: list[int], input_splits: list[int],
                   group: dist.ProcessGroup) -> Tensor:
    """Non-differentiable ``all_to_all_single`` along dim 0 with explicit split sizes."""
    x = x.contiguous()
    out = x.new_empty((sum(output_splits),) + tuple(x.shape[1:]))
    dist.all_to_all_single(out, x, output_splits, input_splits, group=group)
    return out


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, output_splits: list[int], input_splits: list[int],  # type: ignore[override]
                group: dist.ProcessGroup) -> Tensor:
        ctx.splits = (output_splits, input_splits)
        ctx.group = group
        return all_to_all_raw(x, output_splits, input_splits, group)

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        output_splits, input_splits = ctx.splits
        return all_to_all_raw(grad, input_splits, output_splits, ctx.group), None, None, None


def all_to_all(x: Tensor, output_splits: list[int], input_splits: list[int],
               group: dist.ProcessGroup) -> Tensor:
    """Differentiable all-to-all: rows ``input_splits[j]`` go to rank j; ``output_splits[j]`` arrive from j.

    Every rank must call it (also with zero rows), in forward and — because the autograd node is
    always recorded when ``x`` requires grad — in backward.
    """
    return _AllToAll.apply(x, output_splits, input_splits, group)
