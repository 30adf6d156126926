"""The MoE MLP: router → dispatcher → experts → combine, each step behind its own seam."""

from __future__ import annotations

from torch import Tensor, nn

from biomoe.model.moe.dispatch import LocalDispatcher, TokenDispatcher
from biomoe.model.moe.experts import Experts
from biomoe.model.moe.router import TopKRouter


class MoELayer(nn.Module):
    """A sparse SwiGLU MLP.

    Parallelism is installed from outside: the expert-parallel strategy replaces
    ``self.dispatcher`` with an all-to-all dispatcher and ``self.experts`` with the local shard;
    this class never sees a process group.
    """

    def __init__(self, router: TopKRouter, experts: Experts,
                 dispatcher: TokenDispatcher | None = None) -> None:
        super().__init__()
        self.router = router
        self.experts = experts
        self.dispatcher: TokenDispatcher = dispatcher or LocalDispatcher()

    def forward(self, hidden: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Returns (output with the input's shape, aux loss, z loss)."""
        shape = hidden.shape
        flat = hidden.reshape(-1, shape[-1])
        routing = self.router(flat)
        plan = self.dispatcher.token_plan(routing) if self.experts.gathers_tokens else None
        if plan is not None:  # the backend gathers each token's copies inside its kernels and sums them itself
            out = self.experts.forward_tokens(flat, routing.expert_weights, plan)
            return out.reshape(shape).to(hidden.dtype), routing.aux_loss, routing.z_loss
        dispatched = self.dispatcher.dispatch(flat, routing)
        probs = dispatched.probs if self.experts.applies_probs else None
        expert_out = self.experts(dispatched.hidden, dispatched.tokens_per_expert, probs)
        out = self.dispatcher.combine(expert_out, dispatched, routing, self.experts.applies_probs)
        return out.reshape(shape).to(hidden.dtype), routing.aux_loss, routing.z_loss
