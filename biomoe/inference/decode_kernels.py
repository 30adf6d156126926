"""Graph-safe kernels for the decode step, and whether a model's step can be a CUDA graph at all.

On a GPU one decoding step is a few dozen small kernels for a whole batch, so launching them from
Python, not the arithmetic, sets the speed; captured once as a CUDA graph, the step replays with
no host work (:mod:`~biomoe.inference.static_decoder`). Capture needs kernels that read nothing on
the host: :func:`decode_kernels` swaps them in on the same weights for the step (prefills run the
model as it was built), and :func:`decode_graph_supported` says whether every part of the model is
known to capture.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator

import torch
from torch import nn

from biomoe.backends.te.dispatch import TEPermuteDispatcher
from biomoe.inference.load import InferenceModel
from biomoe.model.moe import Experts, LocalDispatcher, MoELayer, TopKRouter
from biomoe.model.moe.experts import ExpertBackend, build_backend, grouped_mm_supported
from biomoe.model.swiglu import swiglu
from biomoe.model.transformer import Attention, Block, DenseMLP, MoETransformer

__all__ = ["AllExpertsBackend", "decode_graph_supported", "decode_kernels"]


class AllExpertsBackend(ExpertBackend):
    """Every row through every expert, each row keeping its own expert's output.

    The decode step's expert backend where ``torch._grouped_mm`` cannot run (GPUs before Hopper,
    fp32 weights, unaligned sizes), since the per-expert loop reads its counts on the host. It
    costs E times the arithmetic of routed experts, but a decode step has only batch × top_k rows
    and reads every expert's weights anyway once the batch is large, so the step stays bound by
    reading weights. Never used for a prefill (thousands of rows)."""

    name = "all_experts"

    def __call__(self, rows, tokens_per_expert, gate_up, down, probs=None):
        positions = torch.arange(rows.shape[0], device=rows.device)
        # rows are grouped by expert: row r belongs to expert e when ends[e-1] <= r < ends[e]
        expert_of_row = torch.bucketize(positions, tokens_per_expert.cumsum(0), right=True)
        hidden = swiglu(torch.matmul(rows, gate_up.transpose(-2, -1)))  # [E, rows, F]
        out = torch.matmul(hidden, down.transpose(-2, -1))  # [E, rows, H]
        return out[expert_of_row, positions]


def _decode_expert_backend(experts: Experts, choice: str = "auto") -> ExpertBackend | None:
    """The graph-safe backend for ``experts`` in a decode step; None = keep its own."""
    param = experts.gate_up_proj
    rows = torch.empty(0, experts.hidden_size, device=param.device, dtype=param.dtype)
    grouped_ok = grouped_mm_supported(rows, experts.gate_up_proj, experts.down_proj)
    if choice == "all_experts" or (choice == "auto" and not grouped_ok):
        return AllExpertsBackend()
    if experts.backend_name == "grouped":
        return None
    return build_backend("grouped")


_UNSET = object()


@contextlib.contextmanager
def decode_kernels(module: MoETransformer, experts: str = "auto") -> Iterator[None]:
    """Run the decode step on graph-safe torch kernels, on the same parameters, then restore.

    * Norms: ``nn.RMSNorm.forward``. A TE norm (``TERMSNorm``) is an ``nn.RMSNorm`` whose CUDA
      forward calls TE's kernel through its Python dispatch, which is not known to capture
      cleanly in a CUDA graph; the torch op computes the same function of the same weight.
    * Routers: ``TopKRouter.forward`` (TE's fused router is a subclass with the same parameters).
    * Dispatch: :class:`LocalDispatcher` (argsort on the device) instead of TE's permutation.
    * Experts: ``grouped`` (``torch._grouped_mm``, group offsets on the device) where it runs,
      else :class:`AllExpertsBackend` (``experts="grouped"`` / ``"all_experts"`` choose). TE's
      grouped GEMMs take their split sizes on the host, and ``loop`` reads them with ``.tolist()``.
      Under an FP8 recipe the step's experts therefore compute in bf16 (prefills keep the recipe).

    Attention needs nothing: a cached step is always torch SDPA. Inside, nothing may be prefilled
    through the all-experts backend (E times the work of a routed prefill)."""
    undo: list = []

    def swap(obj: object, name: str, value: object) -> None:
        undo.append((obj, name, obj.__dict__.get(name, _UNSET)))
        obj.__dict__[name] = value

    try:
        for sub in module.modules():
            if isinstance(sub, nn.RMSNorm) and type(sub).forward is not nn.RMSNorm.forward:
                swap(sub, "forward", types.MethodType(nn.RMSNorm.forward, sub))
            elif isinstance(sub, TopKRouter) and type(sub).forward is not TopKRouter.forward:
                swap(sub, "forward", types.MethodType(TopKRouter.forward, sub))
            elif isinstance(sub, MoELayer) and isinstance(sub.dispatcher, TEPermuteDispatcher):
                swap(sub, "dispatcher", LocalDispatcher())
            elif isinstance(sub, Experts):
                backend = _decode_expert_backend(sub, experts)
                if backend is not None:
                    swap(sub, "backend", backend)
        yield
    finally:
        for obj, name, old in reversed(undo):
            if old is _UNSET:
                del obj.__dict__[name]
            else:
                obj.__dict__[name] = old


_EXACT_TYPES = (Block, Attention, DenseMLP, MoELayer, Experts, nn.ModuleList, nn.Linear, nn.Embedding, nn.Dropout)


def decode_graph_supported(model: InferenceModel | MoETransformer) -> tuple[bool, str]:
    """(True, why) when the decode step under :func:`decode_kernels` is made only of parts known
    to capture in a CUDA graph; (False, the first part that is not) otherwise.

    Known: the model's own layers, torch norms and routers (TE's, replaced in the step), the local
    dispatcher (TE's permutation, replaced), SDPA, and the decode expert backends. Not: a CPU, an
    expert-parallel dispatcher or router statistics reduced over ranks (both talk to other
    processes), experts sharded as DTensors, any other module type."""
    module = InferenceModel.wrap(model).module
    device = next(module.parameters()).device
    if device.type != "cuda":
        return False, f"CUDA graphs need a CUDA device, the model is on {device}"
    for name, sub in module.named_modules():
        where = name or "the model"
        if sub.training:
            return False, f"{where} is in training mode (dropout)"
        if isinstance(sub, MoELayer):
            if not isinstance(sub.dispatcher, (LocalDispatcher, TEPermuteDispatcher)):
                return False, f"{where}: dispatcher {type(sub.dispatcher).__name__} is not single-device"
            if hasattr(sub.experts.gate_up_proj, "to_local"):
                return False, f"{where}: experts are sharded over ranks"
        if isinstance(sub, TopKRouter):
            if sub.stats_reducer is not None:
                return False, f"{where}: router statistics are reduced over ranks"
        elif isinstance(sub, (nn.RMSNorm, MoETransformer)) or type(sub) in _EXACT_TYPES:
            pass
        else:
            return False, f"{where} ({type(sub).__module__}.{type(sub).__qualname__}) is not known to be graph-safe"
    return True, "torch kernels, static KV cache"
