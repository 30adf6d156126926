"""Router statistics (aux loss, load counts, bias updates) reduced over a process group.

* ``global``: sum over every data-parallel rank. The aux loss then sees the load of the whole
  global batch — exactly what one device running the global batch would compute — and the
  DeepSeek bias update moves identically on every rank (the bias must stay replicated).
* ``ep``: sum over the EP group only: cheaper, balances the tokens that actually meet on the same
  experts; the bias still must agree, so use ``global`` with ``router_bias_update_rate > 0``.
* ``local``: per-rank statistics (no communication), the classic micro-batch aux loss.

Gradient: the router only differentiates its *local* share of the summed probabilities. Because
data parallelism averages gradients over all ranks, the local share is scaled by the group size
(``stats_grad_scale``) so the averaged gradient equals that of the group-level loss.
"""

from __future__ import annotations

from typing import Callable

import torch.distributed as dist
from torch import Tensor, nn

MODES = ("global", "ep", "local")


def all_reduce_sum(group: dist.ProcessGroup) -> Callable[[Tensor], Tensor]:
    """A ``stats_reducer``: non-differentiable sum of a packed statistics tensor over ``group``."""

    def reduce(packed: Tensor) -> Tensor:
        out = packed.detach().clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
        return out

    return reduce


def install_load_balancing(model: nn.Module, group: dist.ProcessGroup | None) -> None:
    """Set every router's reducer (``None`` group = local statistics)."""
    size = 1 if group is None else dist.get_world_size(group)
    for layer in model.moe_layers():  # type: ignore[operator]
        router = layer.router
        router.stats_reducer = None if group is None or size == 1 else all_reduce_sum(group)
        router.stats_grad_scale = float(size) if router.stats_reducer is not None else 1.0
