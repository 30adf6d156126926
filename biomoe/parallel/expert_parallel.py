"""Expert parallelism: shard the stacked experts over ``ep`` and move tokens with all-to-all.

Each EP rank holds ``E / ep`` consecutive experts (global ids ``rank·E_local …``). A dispatch is

1. local sort of the (token, slot) rows by *global* expert id (the :class:`LocalDispatcher`);
2. all-to-all of the per-expert counts, so every rank knows what it will receive (one host sync
   turns the split sizes into integers — the all-to-all needs them);
3. all-to-all of the rows and their routing weights (differentiable);
4. reorder the received rows from source-rank-major to local-expert-major, so any experts backend
   (loop, grouped, te, te_fused) sees rows grouped by *local* expert with local counts.

``combine`` undoes 4 and 3 and lets the local dispatcher weight and sum the k outputs per token.
Every rank runs both all-to-alls in forward and backward even with zero rows, and a rank that
receives no rows keeps its received tensor in the autograd graph, so nothing hangs.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Shard, distribute_tensor

from biomoe.model.moe.dispatch import DispatchResult, LocalDispatcher, TokenDispatcher
from biomoe.model.moe.layer import MoELayer
from biomoe.model.moe.router import RoutingResult
from biomoe.parallel.comm import all_to_all, all_to_all_raw


class AllToAllDispatcher(TokenDispatcher):
    """Token dispatcher over an EP process group (wraps the local sort-based dispatcher)."""

    def __init__(self, num_experts: int, group: dist.ProcessGroup) -> None:
        self.group = group
        self.ep_size = dist.get_world_size(group)
        if num_experts % self.ep_size:
            raise ValueError(f"num_experts={num_experts} is not divisible by "
                             f"expert_parallel_size={self.ep_size}")
        self.num_experts = num_experts
        self.num_local = num_experts // self.ep_size
        self.local = LocalDispatcher()

    def dispatch(self, hidden: Tensor, routing: RoutingResult) -> DispatchResult:
        ep, n_local = self.ep_size, self.num_local
        local = self.local.dispatch(hidden, routing)  # rows sorted by global expert id
        counts = routing.tokens_per_expert.to(torch.int64)
        # recv_counts[src·E_local + e]: rows rank ``src`` sends to my local expert e.
        recv_counts = all_to_all_raw(counts, [n_local] * ep, [n_local] * ep, self.group)
        send_splits_t = counts.view(ep, n_local).sum(1)
        host = torch.cat([send_splits_t, recv_counts]).tolist()  # the one host sync per layer
        send_splits = host[:ep]
        recv_splits = [sum(host[ep + i * n_local: ep + (i + 1) * n_local]) for i in range(ep)]

        rows = all_to_all(local.hidden, recv_splits, send_splits, self.group)
        probs = all_to_all(local.probs, recv_splits, send_splits, self.group)
        num_rows = sum(recv_splits)
        local_expert = torch.arange(n_local, device=rows.device).repeat(ep)
        expert_of_row = torch.repeat_interleave(local_expert, recv_counts, output_size=num_rows)
        order = torch.argsort(expert_of_row, stable=True)
        tokens_per_expert = recv_counts.view(ep, n_local).sum(0)
        state = {"local": local, "order": order, "send_splits": send_splits,
                 "recv_splits": recv_splits}
        return DispatchResult(rows.index_select(0, order), tokens_per_expert,
                              probs.index_select(0, order), state)

    def combine(self, expert_output: Tensor, dispatched: DispatchResult,
                routing: RoutingResult, probs_applied: bool) -> Tensor:
        state = dispatched.state
        if expert_output.shape[0] == 0 and dispatched.hidden.requires_grad:
            # An empty expert output may be detached from the received rows; tie it back so this
            # rank also runs the backward all-to-alls its peers are waiting for.
            expert_output = expert_output + dispatched.hidden.sum().to(expert_output.dtype) * 0
        order = state["order"]
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel(), device=order.device)
        source_major = expert_output.index_select(0, inverse)
        back = all_to_all(source_major, state["send_splits"], state["recv_splits"], self.group)
        return self.local.combine(back, state["local"], routing, probs_applied)


def shard_experts(layer: MoELayer, ep_mesh: DeviceMesh) -> None:
    """Replace the stacked expert weights by DTensors ``Shard(0)`` over ``ep_mesh``.

    The global shape stays ``[E, …]``, so state-dict keys and row indices are *global* expert ids
    and a distributed checkpoint reshards freely between EP sizes. Rank 0's values are scattered,
    so every rank agrees on the initial experts even if their local RNGs differ.
    """
    experts = layer.experts
    for name in ("gate_up_proj", "down_proj"):
        param = getattr(experts, name)
        sharded = distribute_tensor(param.data, ep_mesh, [Shard(0)])
        setattr(experts, name, nn.Parameter(sharded, requires_grad=param.requires_grad))


def apply_expert_parallel(model: nn.Module, ep_mesh: DeviceMesh) -> None:
    """Shard every MoE layer's experts over ``ep_mesh`` and install the all-to-all dispatcher."""
    group = ep_mesh.get_group()
    for layer in model.moe_layers():  # type: ignore[operator]
        shard_experts(layer, ep_mesh)
        layer.dispatcher = AllToAllDispatcher(layer.experts.num_experts, group)
