"""The ``quack`` expert backend: the gather of every token's k copies happens inside the up-projection's
GEMM, SwiGLU and its gradient in the GEMMs' epilogues, and the backward never needs the
down-projection's output (its epilogue gives the routing weights' gradient).

Saved for backward: the tokens (already saved by the layer before), the interleaved
pre-activation and the routing weights: not the gathered tokens, not the activation, not the
expert outputs. The kernels are :mod:`.ops`'s custom ops; this module wires them into autograd and
into the expert-backend registry.
"""

from __future__ import annotations

import torch
from torch import Tensor

from biomoe.backends.quack import ops as _ops  # noqa: F401  (registers the custom ops)
from biomoe.compat.quack import quack_problem
from biomoe.errors import ConfigError
from biomoe.model.moe.dispatch import TokenPlan, weighted_sum_of_slots
from biomoe.model.moe.experts import Availability, ExpertBackend, ExpertBackendQuery, register_expert_backend

_forward = torch.ops.biomoe.expert_mlp_forward
_backward = torch.ops.biomoe.expert_mlp_backward


class ExpertMLPOverTokens(torch.autograd.Function):
    """``out[t] = Σ_j weights[t, j] · MLP_{e(t, j)}(x[t])`` from the tokens themselves."""

    @staticmethod
    def forward(ctx, x: Tensor, gate_up: Tensor, down: Tensor, weights: Tensor, gather: Tensor,  # type: ignore[override]
                row_of_slot: Tensor, offsets: Tensor, scale: Tensor) -> Tensor:
        top_k = weights.shape[1]
        preact, out_rows = _forward(x, gate_up, down, gather, offsets)
        ctx.save_for_backward(x, gate_up, down, preact, gather, row_of_slot, offsets, scale)
        ctx.top_k, ctx.weights_dtype = top_k, weights.dtype
        return weighted_sum_of_slots(out_rows, weights, row_of_slot, top_k)

    @staticmethod
    def backward(ctx, dout: Tensor):  # type: ignore[override]
        x, gate_up, down, preact, gather, row_of_slot, offsets, scale = ctx.saved_tensors
        dx_rows, d_gate_up, d_down, dscale = _backward(dout.to(x.dtype).contiguous(), x, gate_up, down, preact,
                                                       gather, offsets, scale)
        dx = weighted_sum_of_slots(dx_rows, None, row_of_slot, ctx.top_k)
        d_weights = dscale.index_select(0, row_of_slot).view(-1, ctx.top_k).to(ctx.weights_dtype)
        return dx, d_gate_up, d_down, d_weights, None, None, None, None


class ExpertMLPOverRows(torch.autograd.Function):
    """Expert outputs of rows already grouped by expert (expert parallelism's all-to-all did the
    gather): the same kernels with each row reading itself and a weight of one."""

    @staticmethod
    def forward(ctx, rows: Tensor, gate_up: Tensor, down: Tensor, offsets: Tensor) -> Tensor:  # type: ignore[override]
        gather = torch.arange(rows.shape[0], device=rows.device, dtype=torch.int32)
        preact, out = _forward(rows, gate_up, down, gather, offsets)
        ctx.save_for_backward(rows, gate_up, down, preact, gather, offsets)
        return out

    @staticmethod
    def backward(ctx, dout: Tensor):  # type: ignore[override]
        rows, gate_up, down, preact, gather, offsets = ctx.saved_tensors
        ones = torch.ones(rows.shape[0], device=rows.device, dtype=torch.float32)
        dx, d_gate_up, d_down, _ = _backward(dout.to(rows.dtype).contiguous(), rows, gate_up, down, preact, gather,
                                             offsets, ones)
        return dx, d_gate_up, d_down, None


def check_operands(x: Tensor, gate_up: Tensor) -> None:
    """The kernels compute bf16 on CUDA: a float32 run (``trainer.precision: 32-true``) is refused in
    one line rather than failing inside the kernels' compiler (the torch reference takes any dtype)."""
    if x.is_cuda and (x.dtype != torch.bfloat16 or gate_up.dtype != torch.bfloat16):
        raise ConfigError(f"model.runtime.expert_backend: quack computes in bf16 only, and the experts got "
                          f"{str(x.dtype).removeprefix('torch.')}: train with trainer.precision bf16-mixed or "
                          "bf16-true, or use expert_backend grouped")


def expert_offsets(tokens_per_expert: Tensor) -> Tensor:
    """``[0, n_0, n_0 + n_1, ...]`` as int32: the kernels' row bounds per expert."""
    offsets = torch.zeros(tokens_per_expert.numel() + 1, dtype=torch.int32, device=tokens_per_expert.device)
    offsets[1:] = torch.cumsum(tokens_per_expert, 0)
    return offsets


def quack_availability(query: ExpertBackendQuery) -> Availability:
    """Runs on a Hopper GPU in bf16 with quack-kernels installed and 16-byte aligned widths; each
    refusal completes "quack needs ..." in the line that refuses a configuration naming it."""
    if query.device.type != "cuda":
        return Availability.no("a CUDA GPU")
    if query.capability is None or query.capability[0] != 9:
        found = "" if query.capability is None else f"; this GPU is sm {query.capability[0]}.{query.capability[1]}"
        return Availability.no(f"a Hopper GPU (sm 9.0){found}")
    if query.precision != "bf16":
        return Availability.no(f"bf16 (its kernels compute in bf16 only; precision here is {query.precision})")
    if query.hidden_size % 8 or query.ffn_hidden_size % 8:
        return Availability.no("hidden and expert widths divisible by 8 (16-byte rows)")
    problem = quack_problem()
    if problem is not None:
        return Availability.no(f"quack-kernels, {problem}")
    return Availability.yes("quack grouped GEMMs: gather in the GEMM, SwiGLU in its epilogue")


QUACK_PRIORITY = 15
"""Above ``grouped`` (10): on a Hopper GPU in bf16 the training step of every MoE the speed bench ran
was faster with it, in less memory (docs/benchmarks.md, "quack experts"). Below TE's (20, 30), which
take the FP8/FP4 recipes that quack's kernels do not compute."""


@register_expert_backend("quack", priority=QUACK_PRIORITY, available=quack_availability)  # refusals say what is missing
class QuackBackend(ExpertBackend):
    """Experts by quack-kernels' grouped GEMMs; gathers tokens itself under local dispatch."""

    name = "quack"
    gathers_tokens = True

    def __call__(self, rows, tokens_per_expert, gate_up, down, probs=None):
        check_operands(rows, gate_up)
        return ExpertMLPOverRows.apply(rows, gate_up, down, expert_offsets(tokens_per_expert))

    def over_tokens(self, x: Tensor, weights: Tensor, plan: TokenPlan, gate_up: Tensor, down: Tensor) -> Tensor:
        check_operands(x, gate_up)
        offsets = expert_offsets(plan.tokens_per_expert)
        scale = weights.detach().reshape(-1).index_select(0, plan.order)
        scale = scale.to(torch.promote_types(scale.dtype, torch.float32))  # the kernels take float32
        return ExpertMLPOverTokens.apply(x, gate_up, down, weights, plan.token_of_row.int(), plan.row_of_slot,
                                         offsets, scale)
