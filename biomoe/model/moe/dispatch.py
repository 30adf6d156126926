"""Token dispatchers: move routed tokens to their experts and bring the results back.

The MoE layer is handed a dispatcher and never sees a process group. The local dispatcher sorts
(token, slot) assignments by expert id; the expert-parallel dispatcher (``biomoe.parallel``) wraps
it with all-to-all exchanges. A TE dispatcher can use ``moe_permute`` / ``moe_unpermute``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from biomoe.model.moe.router import RoutingResult


@dataclass
class DispatchResult:
    """Tokens grouped by expert, ready for an experts backend."""

    hidden: Tensor  # [rows, hidden], rows of expert 0 first, then expert 1, ...
    tokens_per_expert: Tensor  # [local experts] int64, sums to rows
    probs: Tensor  # [rows] routing weight of each row (for backends that apply it themselves)
    state: dict[str, Any] = field(default_factory=dict)  # whatever combine needs to undo dispatch


class TokenDispatcher:
    """Interface: ``dispatch`` groups tokens by expert; ``combine`` undoes it and mixes the k outputs."""

    def dispatch(self, hidden: Tensor, routing: RoutingResult) -> DispatchResult:
        raise NotImplementedError

    def combine(self, expert_output: Tensor, dispatched: DispatchResult,
                routing: RoutingResult, probs_applied: bool) -> Tensor:
        raise NotImplementedError


class LocalDispatcher(TokenDispatcher):
    """Single-device dispatch by a stable sort of the flattened expert ids (no host sync)."""

    def dispatch(self, hidden: Tensor, routing: RoutingResult) -> DispatchResult:
        num_tokens, top_k = routing.expert_indices.shape
        flat_experts = routing.expert_indices.reshape(-1)
        order = torch.argsort(flat_experts, stable=True)
        token_of_row = torch.div(order, top_k, rounding_mode="floor")
        rows = hidden.reshape(num_tokens, -1).index_select(0, token_of_row)
        probs = routing.expert_weights.reshape(-1).index_select(0, order)
        return DispatchResult(rows, routing.tokens_per_expert, probs,
                              {"token_of_row": token_of_row, "num_tokens": num_tokens})

    def combine(self, expert_output: Tensor, dispatched: DispatchResult,
                routing: RoutingResult, probs_applied: bool) -> Tensor:
        rows = expert_output
        if not probs_applied:
            rows = rows * dispatched.probs.unsqueeze(-1).to(rows.dtype)
        out = rows.new_zeros(dispatched.state["num_tokens"], rows.shape[-1])
        return out.index_add_(0, dispatched.state["token_of_row"], rows)
