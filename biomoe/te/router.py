"""TE's fused router kernels behind the :class:`~biomoe.moe.router.TopKRouter` interface.

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

from biomoe.moe.router import RoutingResult, TopKRouter, router_z_loss


class TEFusedTopKRouter(TopKRouter):
    """Drop-in subclass; :func:`use_te_router` converts an existing router in place."""

    backend_name = "te_fused_router"

    def forward(self, hidden: Tensor) -> RoutingResult:
        flat = hidden.reshape(-1, hidden.shape[-1])
        if not flat.is_cuda or flat.shape[0] == 0 or self.bias_update_rate > 0:
            return super().forward(hidden)
        from transformer_engine.pytorch.router import (fused_compute_score_for_moe_aux_loss,
                                                       fused_moe_aux_loss,
                                                       fused_topk_with_score_function)

        logits = self.logits(flat)  # fp32 on purpose: routing decisions are precision-sensitive
        dense_weights, routing_map = fused_topk_with_score_function(
            logits, self.top_k, use_pre_softmax=False, num_groups=None, group_topk=None,
            scaling_factor=None, score_function="softmax", expert_bias=None)
        weights, indices = torch.topk(dense_weights, self.top_k, dim=-1)
        counts = routing_map.sum(dim=0, dtype=torch.int64)
        _, probs = fused_compute_score_for_moe_aux_loss(logits, self.top_k, "softmax")
        if self.stats_reducer is None:
            aux = fused_moe_aux_loss(probs, counts, flat.shape[0], self.num_experts, self.top_k, 1.0)
            stats = (counts.float(), probs.detach().sum(0),
                     torch.tensor(float(flat.shape[0]), device=flat.device))
        else:
            stats = self._global_stats(counts, probs)  # (counts, prob sums, tokens)
            aux = self._aux_loss(stats[1], stats[0], stats[2])
        self._accumulate(*stats)
        self._accumulate_entropy(probs)  # full softmax over experts, as the torch router logs
        return RoutingResult(indices, weights, counts, probs, aux, router_z_loss(logits))


def use_te_router(router: TopKRouter) -> TopKRouter:
    """Switch an existing router to the TE kernels without touching its parameters or buffers
    (so state_dict keys and values are unchanged)."""
    if type(router) is TopKRouter:
        router.__class__ = TEFusedTopKRouter
    return router
