"""SwiGLU experts with one weight layout, and the backends that compute them.

Weights are stacked 3-D parameters in the ``nn.Linear`` convention:
``gate_up_proj [E, 2F, H]`` (gate rows first, then up rows) and ``down_proj [E, H, F]`` — the
layout of transformers 5.x Mixtral and of TE's per-expert ``weight{i}``. Backends only *read* these
parameters, so a checkpoint written with one backend loads under every other, and exporting to
Hugging Face is a renaming.

A backend is a callable ``(rows, tokens_per_expert, gate_up, down, probs) -> rows`` over tokens
already grouped by expert. New backends (Transformer Engine, ...) register with
:func:`register_expert_backend`; the model never imports them.
"""

from __future__ import annotations

import logging
import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from biomoe.compat.torch import grouped_mm, has_grouped_mm

log = logging.getLogger(__name__)


class ExpertBackend:
    """Base class for expert computations over expert-grouped rows.

    ``applies_probs`` is True for backends that multiply each row by its routing weight
    themselves (TE's ScaledSwiGLU); the combine step must then not apply them again.
    """

    name: str = "base"
    applies_probs: bool = False

    def __call__(self, rows: Tensor, tokens_per_expert: Tensor, gate_up: Tensor, down: Tensor,
                 probs: Tensor | None = None) -> Tensor:
        raise NotImplementedError


_BACKENDS: dict[str, Callable[[], ExpertBackend]] = {}


def register_expert_backend(name: str) -> Callable:
    """Class decorator: make a backend constructible by name from the config."""

    def wrap(cls: Callable[[], ExpertBackend]) -> Callable[[], ExpertBackend]:
        _BACKENDS[name] = cls
        return cls

    return wrap


def known_backends() -> list[str]:
    """Every registered backend name, and ``auto`` (resolved when the model is built)."""
    _load_optional_backends()
    return sorted(set(_BACKENDS) | {"auto"})


def _load_optional_backends() -> None:
    """Import backend modules that register themselves (TE etc.) if they exist in the package."""
    for module in ("biomoe.backends.te.experts",):
        try:
            __import__(module)
        except ImportError:
            pass


def build_backend(name: str) -> ExpertBackend:
    _load_optional_backends()
    if name == "auto":
        raise ValueError("expert backend 'auto' is resolved when the model is built "
                         "(biomoe.build.build_model); the Experts module needs a concrete name")
    if name not in _BACKENDS:
        raise ValueError(f"unknown expert backend {name!r}; choose one of {known_backends()}")
    return _BACKENDS[name]()


def swiglu(gate_up_out: Tensor) -> Tensor:
    gate, up = gate_up_out.chunk(2, dim=-1)
    return F.silu(gate) * up


@register_expert_backend("loop")
class LoopBackend(ExpertBackend):
    """Reference: one matmul pair per expert (the shape of HF's eager Mixtral experts).

    Reads the per-expert counts on the host (a device sync); simple and obviously right.
    """

    name = "loop"

    def __call__(self, rows, tokens_per_expert, gate_up, down, probs=None):
        outputs = []
        start = 0
        for expert, count in enumerate(tokens_per_expert.tolist()):
            chunk = rows[start:start + count]
            start += count
            hidden = swiglu(F.linear(chunk, gate_up[expert]))
            outputs.append(F.linear(hidden, down[expert]))
        if not outputs:
            return rows.new_zeros(0, down.shape[1])
        return torch.cat(outputs, dim=0)


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward makes the incoming gradient contiguous (``_grouped_mm`` needs it)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:  # type: ignore[override]
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        return grad.contiguous()


def grouped_mm_supported(rows: Tensor, *weights: Tensor) -> bool:
    """``torch._grouped_mm`` needs 16-byte aligned strides, and bf16 + sm90+ on CUDA."""
    if not has_grouped_mm():
        return False
    if rows.is_cuda:
        major, _ = torch.cuda.get_device_capability(rows.device)
        if major < 9 or rows.dtype != torch.bfloat16:
            return False
    elif rows.dtype not in (torch.float32, torch.bfloat16):
        return False
    elif rows.dtype == torch.float32 and torch.compiler.is_compiling():
        return False  # eager CPU runs fp32, but the op's shape check under compile accepts bf16 only
    align = 16 // rows.element_size()
    dims = [rows.shape[-1]] + [d for w in weights for d in w.shape[1:]]
    return all(d % align == 0 for d in dims)


@register_expert_backend("grouped")
class GroupedMMBackend(ExpertBackend):
    """All experts in two grouped GEMMs via ``torch._grouped_mm``; no host sync.

    Falls back to the loop backend (logged once) where ``_grouped_mm`` cannot run: old torch,
    pre-Hopper GPUs, fp16/fp32 on CUDA, or unaligned shapes.
    """

    name = "grouped"

    def __init__(self) -> None:
        self._fallback = LoopBackend()
        self._warned = False

    def __call__(self, rows, tokens_per_expert, gate_up, down, probs=None):
        weight_dtype_ok = gate_up.dtype == rows.dtype
        if not (weight_dtype_ok and grouped_mm_supported(rows, gate_up, down)):
            if not self._warned:
                log.warning("grouped backend: torch._grouped_mm unavailable for %s %s on %s; "
                            "using the per-expert loop", tuple(rows.shape), rows.dtype, rows.device)
                self._warned = True
            return self._fallback(rows, tokens_per_expert, gate_up, down, probs)
        offsets = torch.cumsum(tokens_per_expert, dim=0).to(torch.int32)
        hidden = grouped_mm(rows, gate_up.transpose(-2, -1), offsets)
        hidden = swiglu(_ContiguousGrad.apply(hidden))
        out = grouped_mm(hidden, down.transpose(-2, -1), offsets)
        return _ContiguousGrad.apply(out)


class Experts(nn.Module):
    """Holds the stacked expert weights and delegates computation to a swappable backend."""

    def __init__(self, num_experts: int, hidden_size: int, ffn_hidden_size: int,
                 backend: str = "grouped", init_std: float = 0.02, out_std: float | None = None) -> None:
        super().__init__()
        self.num_experts = num_experts
        self.hidden_size = hidden_size
        self.ffn_hidden_size = ffn_hidden_size
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * ffn_hidden_size, hidden_size))
        self.down_proj = nn.Parameter(torch.empty(num_experts, hidden_size, ffn_hidden_size))
        self.init_std = init_std
        self.out_std = out_std if out_std is not None else init_std
        self.reset_parameters()
        self.set_backend(backend)

    def reset_parameters(self) -> None:
        nn.init.normal_(self.gate_up_proj, std=self.init_std)
        nn.init.normal_(self.down_proj, std=self.out_std)

    def set_backend(self, name: str) -> None:
        """Choose how experts are computed; parameters (and so checkpoints) are untouched."""
        self.backend_name = name
        self.backend = build_backend(name)

    @property
    def applies_probs(self) -> bool:
        return self.backend.applies_probs

    def forward(self, rows: Tensor, tokens_per_expert: Tensor, probs: Tensor | None = None) -> Tensor:
        device_type = rows.device.type
        if torch.is_autocast_enabled(device_type):  # autocast skips _grouped_mm / custom kernels
            rows = rows.to(torch.get_autocast_dtype(device_type))
        backend = self.backend
        # Under expert parallelism the weights are DTensors sharded over experts; backends compute
        # on this rank's experts only (rows are grouped by *local* expert).
        gate_up, down = _local(self.gate_up_proj), _local(self.down_proj)
        if gate_up.dtype != rows.dtype:
            gate_up, down = gate_up.to(rows.dtype), down.to(rows.dtype)
        if rows.shape[0] == 0:
            # No rows (an EP rank nobody routed to): skip kernels that dislike M=0, but keep every
            # weight (and probs) in the graph so gradients are zeros, never missing — a missing
            # grad on one rank desynchronises FSDP's reduce-scatter and the backward all-to-all.
            tie = gate_up.sum() + down.sum() + (probs.sum().to(rows.dtype) if probs is not None else 0)
            return rows.new_zeros(0, self.hidden_size) + (rows.sum() + tie) * 0
        return backend(rows, tokens_per_expert, gate_up, down, probs)

    def extra_repr(self) -> str:
        return (f"experts={self.num_experts}, hidden={self.hidden_size}, "
                f"ffn={self.ffn_hidden_size}, backend={self.backend_name}")


def _local(param: Tensor) -> Tensor:
    """The local shard of a DTensor parameter (differentiable), or the tensor itself."""
    to_local = getattr(param, "to_local", None)
    return to_local() if to_local is not None else param


def scaled_init_std(init_std: float, num_layers: int) -> float:
    """GPT-2 style residual scaling for output projections: std / sqrt(2·layers)."""
    return init_std / math.sqrt(2 * num_layers)
