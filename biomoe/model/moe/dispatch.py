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


@dataclass
class TokenPlan:
    """Where every (token, slot) assignment goes when rows are sorted by expert, without moving
    a row: for expert backends that gather tokens inside their own kernels."""

    order: Tensor  # [rows]: row r is (token, slot) order[r], flattened as token * k + slot
    row_of_slot: Tensor  # [rows]: the inverse permutation
    token_of_row: Tensor  # [rows]: the token row r reads
    tokens_per_expert: Tensor  # [experts]


class TokenDispatcher:
    """Interface: ``dispatch`` groups tokens by expert; ``combine`` undoes it and mixes the k outputs."""

    def token_plan(self, routing: RoutingResult) -> TokenPlan | None:
        """The expert-sorted order for experts that gather each token's copies inside their own
        kernels (:attr:`~biomoe.model.moe.experts.ExpertBackend.gathers_tokens`), or None where the
        rows must be moved by this dispatcher (to other devices, through another library)."""
        return None

    def dispatch(self, hidden: Tensor, routing: RoutingResult) -> DispatchResult:
        raise NotImplementedError

    def combine(self, expert_output: Tensor, dispatched: DispatchResult,
                routing: RoutingResult, probs_applied: bool) -> Tensor:
        raise NotImplementedError


class _GatherCopies(torch.autograd.Function):
    """``rows = x[token_of_row]`` where every row of ``x`` is taken exactly ``copies`` times.

    Autograd's own backward of a gather is a scatter-add (atomics, a zeroed buffer first). Here
    each token's ``copies`` gradient rows are *gathered* through ``row_of_slot`` (the inverse
    permutation) and summed: one read of the gradient, no atomics, deterministic."""

    @staticmethod
    def forward(ctx, x: Tensor, token_of_row: Tensor, row_of_slot: Tensor, copies: int) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(row_of_slot)
        ctx.copies = copies
        return x.index_select(0, token_of_row)

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        (row_of_slot,) = ctx.saved_tensors
        return weighted_sum_of_slots(grad, None, row_of_slot, ctx.copies), None, None, None


def weighted_sum_of_slots(rows: Tensor, weights: Tensor | None, row_of_slot: Tensor, top_k: int) -> Tensor:
    """``out[t] = Σ_j w[t, j] · rows[row_of_slot[t·k + j]]`` (a plain sum where ``weights`` is None).

    For one or two slots each slot's rows are gathered into a contiguous ``[tokens, hidden]`` buffer
    and the second is added to the first by one fused multiply-add: the product over a gathered
    ``[tokens, k, hidden]`` copy with weights broadcast along ``hidden`` runs in torch's generic
    elementwise kernel, and the sum after it is one more pass (docs/benchmarks.md has the timing).
    Past two slots, rounding every partial sum to bf16 would lose the
    accuracy of the reduction's fp32 accumulator, so the gathered copy is reduced as a whole; so it
    is under ``torch.compile`` too, which fuses gather, product and sum into one kernel itself."""
    hidden = rows.shape[-1]
    if top_k > 2 or torch.compiler.is_compiling():
        picked = rows.index_select(0, row_of_slot).view(-1, top_k, hidden)
        return picked.sum(1) if weights is None else (picked * weights.to(rows.dtype).unsqueeze(-1)).sum(1)
    slots = row_of_slot.view(-1, top_k)
    out = rows.index_select(0, slots[:, 0])
    if weights is not None:
        out.mul_(weights[:, :1])
    if top_k == 2:
        second = rows.index_select(0, slots[:, 1])
        out = out.add_(second) if weights is None else out.addcmul_(second, weights[:, 1:])
    return out


class _WeightedCombine(torch.autograd.Function):
    """``out[t] = Σ_j w[t, j] · rows[row_of_slot[t·k + j]]``: each token's k expert outputs, weighted.

    A gather by the inverse permutation instead of a scatter-add into a zeroed buffer; the
    backward gathers too (rows' gradient through ``order``), so no step of dispatch or combine
    uses atomics. ``weights`` may be None (the experts applied them): a plain sum."""

    @staticmethod
    def forward(ctx, rows: Tensor, weights: Tensor | None, row_of_slot: Tensor, order: Tensor,  # type: ignore[override]
                top_k: int) -> Tensor:
        ctx.top_k = top_k
        ctx.save_for_backward(rows, weights, row_of_slot, order)
        return weighted_sum_of_slots(rows, weights, row_of_slot, top_k)

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        rows, weights, row_of_slot, order = ctx.saved_tensors
        k, hidden = ctx.top_k, grad.shape[-1]
        grad = grad.to(rows.dtype)
        grad_weights = None
        if weights is None:
            grad_picked = grad.unsqueeze(1).expand(-1, k, hidden)
        else:
            grad_picked = grad.unsqueeze(1) * weights.to(rows.dtype).unsqueeze(-1)
            if ctx.needs_input_grad[1]:
                picked = rows.index_select(0, row_of_slot).view(-1, k, hidden)
                acc = torch.promote_types(rows.dtype, torch.float32)  # a dot product: accumulate in fp32 at least
                grad_weights = (picked.to(acc) * grad.to(acc).unsqueeze(1)).sum(-1).to(weights.dtype)
        grad_rows = grad_picked.reshape(-1, hidden).index_select(0, order)
        return grad_rows, grad_weights, None, None, None


class LocalDispatcher(TokenDispatcher):
    """Single-device dispatch by a stable sort of the flattened expert ids (no host sync).

    Row ``r`` of the dispatched rows is (token, slot) ``order[r]``; ``row_of_slot`` is the inverse
    permutation. Both directions move rows by gathers only (see :class:`_GatherCopies` and
    :class:`_WeightedCombine`)."""

    def plan(self, routing: RoutingResult) -> TokenPlan:
        """The expert-sorted order of the (token, slot) assignments and its inverse."""
        top_k = routing.expert_indices.shape[1]
        order = torch.argsort(routing.expert_indices.reshape(-1), stable=True)
        row_of_slot = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device=order.device))
        token_of_row = torch.div(order, top_k, rounding_mode="floor")
        return TokenPlan(order, row_of_slot, token_of_row, routing.tokens_per_expert)

    def token_plan(self, routing: RoutingResult) -> TokenPlan:
        return self.plan(routing)  # one device: the experts' kernels can read the tokens where they are

    def dispatch(self, hidden: Tensor, routing: RoutingResult) -> DispatchResult:
        num_tokens, top_k = routing.expert_indices.shape
        plan = self.plan(routing)
        rows = _GatherCopies.apply(hidden.reshape(num_tokens, -1), plan.token_of_row, plan.row_of_slot, top_k)
        probs = routing.expert_weights.reshape(-1).index_select(0, plan.order)
        return DispatchResult(rows, routing.tokens_per_expert, probs,
                              {"order": plan.order, "row_of_slot": plan.row_of_slot, "num_tokens": num_tokens,
                               "top_k": top_k})

    def combine(self, expert_output: Tensor, dispatched: DispatchResult,
                routing: RoutingResult, probs_applied: bool) -> Tensor:
        state = dispatched.state
        weights = None if probs_applied else routing.expert_weights
        return _WeightedCombine.apply(expert_output, weights, state["row_of_slot"], state["order"],
                                      state["top_k"])
