"""Top-k token routers.

The router decides, for every token, which ``top_k`` experts see it and with what weight, and
computes the two regularisers that keep routing healthy: the Switch load-balancing loss and the
router z-loss. Router math runs in fp32 whatever the surrounding precision, because small logit
differences decide expert choice and bf16 rounding makes routing noisy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class RoutingResult:
    """What every router returns; dispatchers and the MoE layer depend only on this."""

    expert_indices: Tensor  # [tokens, k] int64
    expert_weights: Tensor  # [tokens, k] fp32, renormalised to sum to 1 per token
    tokens_per_expert: Tensor  # [experts] int64 (local counts; EP reduces them for statistics)
    router_probs: Tensor  # [tokens, experts] fp32 softmax over all experts (for aux loss / stats)
    aux_loss: Tensor  # scalar
    z_loss: Tensor  # scalar


def load_balancing_loss(router_probs: Tensor, tokens_per_expert: Tensor, top_k: int) -> Tensor:
    """Switch-Transformer loss ``E · Σ_i f_i · P_i``.

    ``f_i`` is the fraction of routed (token, slot) assignments sent to expert i (so Σ f_i = 1) and
    ``P_i`` the mean router probability of expert i. It equals 1 for perfectly uniform routing
    and grows to E when one expert takes everything. ``f`` carries no gradient (it comes from a
    top-k); the gradient flows through ``P``.
    """
    tokens = torch.full((), float(router_probs.shape[0]), dtype=torch.float32,
                        device=router_probs.device)
    return load_balancing_loss_from_sums(router_probs.sum(0), tokens_per_expert.to(router_probs.dtype),
                                         tokens, top_k)


def load_balancing_loss_from_sums(prob_sums: Tensor, counts: Tensor, tokens: Tensor, top_k: int) -> Tensor:
    """:func:`load_balancing_loss` from per-expert sums, which may be reduced over ranks.

    No host sync: zero tokens give zero counts and sums, hence a zero loss."""
    denom = tokens.clamp_min(1.0)
    f = counts / (denom * top_k)
    p = prob_sums / denom
    return prob_sums.shape[0] * torch.sum(f * p)


def expert_counts(indices: Tensor, num_experts: int) -> Tensor:
    """Assignments per expert (int64 [E]); a scatter-add keeps the shape static for torch.compile.

    The adds are int32: compiled, an int32 scatter-add is a kernel of atomic adds, while an int64
    one falls back to the sorting ``index_put`` kernel, which sums the duplicates of each index
    one after another: all tokens land on E indices, and that kernel serialised the whole layer
    (docs/benchmarks.md, "The MoE step against its dense twin")."""
    flat = indices.reshape(-1)
    counts = torch.zeros(num_experts, dtype=torch.int32, device=flat.device)
    ones = torch.ones(flat.shape, dtype=torch.int32, device=flat.device)
    return counts.index_add_(0, flat, ones).to(torch.int64)


def router_z_loss(logits: Tensor) -> Tensor:
    """ST-MoE z-loss: mean over tokens of ``logsumexp(logits)²``; keeps router logits small."""
    if logits.shape[0] == 0:
        return logits.sum() * 0.0
    return torch.logsumexp(logits, dim=-1).square().mean()


class TopKRouter(nn.Module):
    """Mixtral-style router: linear → softmax → top-k → renormalise over the chosen k.

    With ``bias_update_rate > 0`` it also keeps a DeepSeek-V3 style expert bias: added to the
    scores for *selection only* (the weights still come from the unbiased softmax), and moved
    outside autograd by :meth:`update_bias` after each optimizer step, pushing under-loaded experts
    up and over-loaded ones down. That balances load without a gradient-distorting loss.
    """

    def __init__(self, hidden_size: int, num_experts: int, top_k: int,
                 bias_update_rate: float = 0.0) -> None:
        super().__init__()
        self.num_experts = num_experts
        self.top_k = top_k
        self.bias_update_rate = bias_update_rate
        self.gate = nn.Linear(hidden_size, num_experts, bias=False)
        # Persistent: the bias is training state and must survive checkpoint/resume exactly.
        self.register_buffer("expert_bias", torch.zeros(num_experts, dtype=torch.float32))
        # Non-persistent statistics (window statistics, not model state): ``load_counts`` and
        # ``entropy_sum`` accumulate between two logging steps; ``step_counts`` holds only the
        # current optimizer step's assignments (all its micro-batches), which the bias update
        # reads and clears, so the bias moves by what this step routed whatever the logging interval.
        self.register_buffer("load_counts", torch.zeros(num_experts, dtype=torch.float32),
                             persistent=False)
        self.register_buffer("step_counts", torch.zeros(num_experts, dtype=torch.float32),
                             persistent=False)
        self.register_buffer("entropy_sum", torch.zeros(2, dtype=torch.float32), persistent=False)
        """[Σ per-token router entropy (nats), tokens] for logging how decisive routing is."""
        self.stats_reducer = None
        """Optional callable(Tensor) -> Tensor that sums statistics over a process group.

        ``None`` means local statistics. The expert-parallel strategy installs an all-reduce over
        the group the config names (see README: global vs local load balancing)."""
        self.stats_grad_scale = 1.0
        """Multiplies the gradient of the local probability share when statistics are reduced.

        Data parallelism averages gradients over ranks, while only the local share of a reduced
        sum is differentiable here; scaling it by the group size makes the averaged gradient that
        of the group-level aux loss. The loss *value* is unchanged."""

    def logits(self, hidden: Tensor) -> Tensor:
        return F.linear(hidden.float(), self.gate.weight.float())

    def select(self, probs: Tensor) -> tuple[Tensor, Tensor]:
        """Pick top-k experts (optionally bias-adjusted) and renormalise their unbiased probs."""
        if self.bias_update_rate > 0:
            _, indices = torch.topk(probs + self.expert_bias, self.top_k, dim=-1)
            weights = probs.gather(-1, indices)
        else:
            weights, indices = torch.topk(probs, self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(1e-20)
        return indices, weights

    def forward(self, hidden: Tensor) -> RoutingResult:
        logits = self.logits(hidden.reshape(-1, hidden.shape[-1]))
        probs = torch.softmax(logits, dim=-1)
        indices, weights = self.select(probs)
        counts = expert_counts(indices, self.num_experts)
        stats_counts, stats_probs, stats_tokens = self._global_stats(counts, probs)
        aux = self._aux_loss(stats_probs, stats_counts, stats_tokens)
        z = router_z_loss(logits)
        self._accumulate(stats_counts)
        self._accumulate_entropy(probs)
        return RoutingResult(indices, weights, counts, probs, aux, z)

    def _global_stats(self, counts: Tensor, probs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        # torch.full launches a fill; torch.tensor(x, device=cuda) would copy from the host and sync.
        tokens = torch.full((), float(probs.shape[0]), dtype=torch.float32, device=probs.device)
        counts = counts.float()
        if self.stats_reducer is None:
            return counts, probs.sum(0), tokens
        packed = torch.cat([counts, probs.detach().sum(0), tokens.view(1)])
        reduced = self.stats_reducer(packed)
        e = self.num_experts
        # Gradient flows through the local prob sum; the remote part enters as a constant.
        local = probs.sum(0) * self.stats_grad_scale
        prob_sums = local + (reduced[e:2 * e] - local.detach())
        return reduced[:e], prob_sums, reduced[2 * e]

    def _aux_loss(self, prob_sums: Tensor, counts: Tensor, tokens: Tensor) -> Tensor:
        return load_balancing_loss_from_sums(prob_sums, counts, tokens, self.top_k)

    @torch.no_grad()
    def _accumulate(self, counts: Tensor) -> None:
        """Add this forward's assignments per expert (reduced over the load-balancing group, if
        any) to the logging window and, with a bias to update, to this step's counts."""
        if not self.training:
            return
        self.load_counts += counts.detach()
        if self.bias_update_rate > 0:
            self.step_counts += counts.detach()

    @torch.no_grad()
    def _accumulate_entropy(self, probs: Tensor) -> None:
        if self.training and probs.shape[0] > 0:
            entropy = -(probs * torch.log(probs.clamp_min(1e-20))).sum(-1)
            self.entropy_sum += torch.stack([entropy.sum(), entropy.new_full((), float(probs.shape[0]))])

    @torch.no_grad()
    def reset_stats(self) -> None:
        """Start a new logging window (this step's counts are the bias update's to clear)."""
        self.entropy_sum.zero_()
        self.load_counts.zero_()

    @torch.no_grad()
    def update_bias(self) -> None:
        """Aux-loss-free balancing step from this optimizer step's load:
        ``b_i += rate · sign(mean_load − load_i)``, then the step's counts start again from zero.

        No host check for empty statistics: with no routed tokens every load is 0, the sign is 0 and
        the bias stays, so the step never waits for the device."""
        if self.bias_update_rate <= 0:
            return
        error = self.step_counts.mean() - self.step_counts
        self.expert_bias += self.bias_update_rate * torch.sign(error)
        self.step_counts.zero_()


def router_entropy(entropy_sum: Tensor, num_experts: int) -> Tensor | None:
    """Mean per-token entropy of the router's softmax, normalised by log(E) (1 = uniform), from a
    router's ``entropy_sum``; None when no token was routed since the last reset."""
    if float(entropy_sum[1]) == 0:
        return None
    return entropy_sum[0] / entropy_sum[1] / math.log(num_experts)
