"""Token dispatch with TE's fused ``moe_permute`` / ``moe_unpermute`` kernels.

Same contract as :class:`~biomoe.model.moe.dispatch.LocalDispatcher`: rows come out expert-major
(expert 0's rows first), ``tokens_per_expert`` gives the group sizes. Under an FP8 autocast each
group is padded with zero rows to the recipe's alignment (16 for per-tensor and block FP8, 32 for
MXFP8) in the same kernel (``moe_permute_and_pad_with_probs``), and ``tokens_per_expert`` then
holds the padded sizes; ``moe_unpermute`` drops the padding again. Outside FP8 nothing is padded
and there is no host sync.
"""

from __future__ import annotations

import torch
from torch import Tensor

from biomoe.compat.torch import eager_when_compiled
from biomoe.model.moe.dispatch import DispatchResult, TokenDispatcher
from biomoe.model.moe.router import RoutingResult
from biomoe.backends.te.precision import active_alignment


def dense_routing(routing: RoutingResult) -> tuple[Tensor, Tensor]:
    """[T, E] routing weights (zero where not routed) and the boolean routing map TE expects."""
    num_tokens = routing.expert_indices.shape[0]
    num_experts = routing.tokens_per_expert.shape[0]
    weights = routing.expert_weights.float()
    dense = weights.new_zeros(num_tokens, num_experts).scatter(1, routing.expert_indices, weights)
    mask = torch.zeros(num_tokens, num_experts, dtype=torch.bool, device=weights.device)
    mask.scatter_(1, routing.expert_indices, True)
    return dense, mask


class TEPermuteDispatcher(TokenDispatcher):
    """Single-device dispatch through TE's permutation kernels (CUDA only)."""

    name = "te_permute"

    @eager_when_compiled  # TE's permutation ops are not traceable; compiled blocks split here
    def dispatch(self, hidden: Tensor, routing: RoutingResult) -> DispatchResult:
        from transformer_engine.pytorch import (moe_permute_and_pad_with_probs,  # optional dependency
                                                moe_permute_with_probs)

        num_tokens, top_k = routing.expert_indices.shape
        dense_probs, mask = dense_routing(routing)
        state = {"num_tokens": num_tokens, "dense_probs": dense_probs, "pad_offsets": None}
        if num_tokens == 0:
            state["empty"] = True
            return DispatchResult(hidden.new_zeros(0, hidden.shape[-1]), routing.tokens_per_expert,
                                  dense_probs.new_zeros(0), state)
        align = active_alignment()
        if align > 1:
            rows, probs, row_id_map, pad_offsets, counts = moe_permute_and_pad_with_probs(
                hidden, dense_probs, mask, routing.tokens_per_expert, align)
            state["pad_offsets"] = pad_offsets
        else:
            rows, probs, row_id_map = moe_permute_with_probs(hidden, dense_probs, mask,
                                                             num_tokens * top_k)
            counts = routing.tokens_per_expert
        state["row_id_map"] = row_id_map
        return DispatchResult(rows, counts, probs, state)

    @eager_when_compiled
    def combine(self, expert_output: Tensor, dispatched: DispatchResult,
                routing: RoutingResult, probs_applied: bool) -> Tensor:
        from transformer_engine.pytorch import moe_unpermute  # optional dependency

        state = dispatched.state
        if state.get("empty"):
            return expert_output.new_zeros(0, expert_output.shape[-1])
        merging = None if probs_applied else state["dense_probs"]
        return moe_unpermute(expert_output, state["row_id_map"], merging_probs=merging,
                             restore_shape=torch.Size((state["num_tokens"], expert_output.shape[-1])),
                             map_type="mask", pad_offsets=state["pad_offsets"])
