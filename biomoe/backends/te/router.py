"""TE's fused router kernels behind the :class:`~biomoe.model.moe.router.TopKRouter` interface.

Same parameters, buffers and numbers as the torch router: the gate runs in fp32 (a torch
matmul, never quantised), then TE's ``fused_topk_with_score_function`` does softmax + top-k +
renormalisation in one kernel, and ``fused_compute_score_for_moe_aux_loss`` / ``fused_moe_aux_loss``
compute the Switch load-balancing loss. Top-k *then* softmax over the k logits
(``use_pre_softmax=False``) is exactly softmax → top-k → renormalise, which is what the torch
router does. The z-loss, statistics (router entropy included) and bias update are inherited unchanged.

Cases the fused kernel does not cover fall back to the torch math (per call, no warning needed
because the numbers are the same): CPU tensors, no tokens, the auxiliary-loss-free expert bias
(TE applies ``expert_bias`` only to sigmoid scores; ours biases softmax scores), and global
load-balancing statistics (``stats_reducer`` set by expert parallelism) for the aux loss.
"""

from __future__ import annotations

import torch
from torch import Tensor

from biomoe.compat.torch import eager_when_compiled
from biomoe.model.moe.router import RoutingResult, TopKRouter, expert_counts, router_z_loss


class TEFusedTopKRouter(TopKRouter):
    """Drop-in subclass of the torch router (same constructor, parameters and buffers)."""

    backend_name = "te_fused_router"

    def forward(self, hidden: Tensor) -> RoutingResult:
        flat = hidden.reshape(-1, hidden.shape[-1])
        if not flat.is_cuda or flat.shape[0] == 0 or self.bias_update_rate > 0:
            return super().forward(hidden)
        return self._fused_forward(flat)

    @eager_when_compiled
    def _fused_forward(self, flat: Tensor) -> RoutingResult:
        from transformer_engine.pytorch.router import (fused_compute_score_for_moe_aux_loss,  # optional dependency
                                                       fused_moe_aux_loss,
                                                       fused_topk_with_score_function)

        logits = self.logits(flat)  # fp32 on purpose: routing decisions are precision-sensitive
        dense_weights, routing_map = fused_topk_with_score_function(
            logits, self.top_k, use_pre_softmax=False, num_groups=None, group_topk=None,
            scaling_factor=None, score_function="softmax", expert_bias=None)
        weights, indices = routed_experts(dense_weights, routing_map, self.top_k)
        # Counted from the ids the dispatcher permutes by, not from the map: a diverged row (NaN or
        # inf logits) can carry more or fewer than top_k trues, and TE's padded permute writes rows
        # at offsets given by these counts, so any disagreement is an out-of-bounds write.
        counts = expert_counts(indices, self.num_experts)
        _, probs = fused_compute_score_for_moe_aux_loss(logits, self.top_k, "softmax")
        if self.stats_reducer is None:
            aux = fused_moe_aux_loss(probs, counts, flat.shape[0], self.num_experts, self.top_k, 1.0)
            stats_counts = counts.float()
        else:
            stats_counts, prob_sums, tokens = self._global_stats(counts, probs)
            aux = self._aux_loss(prob_sums, stats_counts, tokens)
        self._accumulate(stats_counts)
        self._accumulate_entropy(probs)  # full softmax over experts, as the torch router logs
        return RoutingResult(indices, weights, counts, probs, aux, router_z_loss(logits))


def routed_experts(dense_weights: Tensor, routing_map: Tensor, top_k: int) -> tuple[Tensor, Tensor]:
    """Weights and expert ids of each token's routed experts, exactly those in ``routing_map``.

    A plain ``topk`` of ``dense_weights`` is not enough: when one logit dwarfs the others (a
    diverging run), the second routed expert's softmax weight underflows to 0.0 and ties with
    every unrouted expert, so ``topk`` may name an expert the map does not route the token to.
    Adding the map as +2 (weights are at most 1) ranks routed experts first in every row. The
    per-expert counts are then taken from these ids (not from the map, see
    :meth:`TEFusedTopKRouter._fused_forward`), so the counts and the ids the dispatcher permutes by
    always agree."""
    score = dense_weights + 2.0 * routing_map.to(dense_weights.dtype)
    indices = torch.topk(score, top_k, dim=-1).indices
    return dense_weights.gather(1, indices), indices
