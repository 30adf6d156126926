"""SwiGLU experts with one weight layout, and the registry of backends that compute them.

Weights are stacked 3-D parameters in the ``nn.Linear`` convention:
``gate_up_proj [E, 2F, H]`` (gate rows first, then up rows) and ``down_proj [E, H, F]`` — the
layout of transformers 5.x Mixtral and of TE's per-expert ``weight{i}``. Backends only *read* these
parameters, so a checkpoint written with one backend loads under every other, and exporting to
Hugging Face is a renaming.

A backend is a callable ``(rows, tokens_per_expert, gate_up, down, probs) -> rows`` over tokens
already grouped by expert. :data:`EXPERT_BACKENDS` is the one table of them: each entry has a
name (what ``model.runtime.expert_backend`` says), a priority and an availability check, from
which ``auto`` is resolved and every list of valid names is printed. The torch backends ``loop``
and ``grouped`` are registered here; other packages register theirs with
:func:`register_expert_backend` when they are imported, or name a loader that does so the first
time the registry is asked (:meth:`ExpertBackendRegistry.add_loader`: importing ``biomoe`` makes
``biomoe.backends`` register Transformer Engine's ``te`` and ``te_fused`` that way), so the model
never imports them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from biomoe.compat.torch import grouped_mm, has_grouped_mm
from biomoe.errors import ConfigError
from biomoe.model.moe.dispatch import TokenPlan
from biomoe.model.swiglu import split_projection, swiglu, swiglu_into_gate

log = logging.getLogger(__name__)

AUTO = "auto"
"""The name that asks the registry for the best available backend instead of naming one."""


class ExpertBackend:
    """Base class for expert computations over expert-grouped rows.

    ``applies_probs`` is True for backends that multiply each row by its routing weight
    themselves (TE's ScaledSwiGLU); the combine step must then not apply them again.
    """

    name: str = "base"
    applies_probs: bool = False
    gathers_tokens: bool = False
    """True for backends that read each token's copies inside their own kernels (:meth:`over_tokens`):
    under local dispatch the layer then hands them the tokens and the sort order instead of rows."""

    def __call__(self, rows: Tensor, tokens_per_expert: Tensor, gate_up: Tensor, down: Tensor,
                 probs: Tensor | None = None) -> Tensor:
        raise NotImplementedError

    def over_tokens(self, x: Tensor, weights: Tensor, plan: TokenPlan, gate_up: Tensor, down: Tensor) -> Tensor:
        """``out[t] = Σ_j weights[t, j] · expert_{e(t, j)}(x[t])`` (backends with ``gathers_tokens``)."""
        raise NotImplementedError


# ------------------------------------------------------------------------------- the registry
@dataclass(frozen=True)
class ExpertBackendQuery:
    """What is known about a run when its expert backend is chosen, before the model is built."""

    device: torch.device = torch.device("cpu")
    """Where the experts will compute."""
    capability: tuple[int, int] | None = None
    """The CUDA device's compute capability; None off CUDA."""
    precision: str = "bf16"
    """The precision recipe that will run (``model.runtime.precision``, after any fallback)."""
    hidden_size: int = 0
    ffn_hidden_size: int = 0
    libraries: frozenset[str] = frozenset()
    """Optional kernel libraries usable on this device (``"transformer_engine"``), probed once by
    the build step so that checks need not import them."""


@dataclass(frozen=True)
class Availability:
    """A backend's answer to one :class:`ExpertBackendQuery`.

    ``runs``: it can compute here, so naming it is accepted. ``preferred``: ``auto`` may take it
    (a backend that runs but was measured slower here says so with ``preferred=False``).
    ``reason`` is shown in the start-up line (``experts=<name> (<reason>)``) or in the error.
    """

    runs: bool
    reason: str = ""
    preferred: bool = True

    @classmethod
    def yes(cls, reason: str = "") -> Availability:
        return cls(True, reason)

    @classmethod
    def no(cls, reason: str) -> Availability:
        return cls(False, reason, preferred=False)

    @classmethod
    def not_preferred(cls, reason: str) -> Availability:
        return cls(True, reason, preferred=False)


AvailabilityCheck = Callable[[ExpertBackendQuery], Availability]


def always_available(query: ExpertBackendQuery) -> Availability:
    """For backends that run anywhere torch does (they give no reason of their own)."""
    return Availability.yes()


@dataclass(frozen=True)
class ExpertBackendSpec:
    """One registered backend: how to build it and when to choose it."""

    name: str
    factory: Callable[[], ExpertBackend]
    priority: int | None = None
    """``auto`` tries higher priorities first; None = used only when named."""
    available: AvailabilityCheck = always_available
    requires: str = ""
    """What it needs, for the error when it is named where it cannot run
    (``"Transformer Engine and a CUDA GPU (pip install biomoe[te])"``)."""
    uses_precision_recipe: bool = False
    """Computes inside the FP8/FP4 precision recipe; the others compute in bf16 under any recipe."""


class ExpertBackendRegistry:
    """Name -> :class:`ExpertBackendSpec`; resolves ``auto`` and explicit names for a query."""

    def __init__(self) -> None:
        self._specs: dict[str, ExpertBackendSpec] = {}
        self._loaders: list[Callable[[], object]] = []

    def add_loader(self, loader: Callable[[], object]) -> None:
        """Run ``loader`` (which registers backends) the first time names are listed, looked up or
        resolved: a package can offer its backends without being imported until they are asked for
        (``biomoe`` registers ``te`` and ``te_fused`` so; importing the package stays fast)."""
        self._loaders.append(loader)

    def _load(self) -> None:
        while self._loaders:  # popped first: a loader that lists names itself does not recurse
            self._loaders.pop(0)()

    def register(self, spec: ExpertBackendSpec) -> None:
        """Add ``spec``. Registering the same factory again (a module imported twice) replaces it;
        a different backend under a taken name is refused, so plug-ins cannot shadow each other."""
        if spec.name == AUTO:
            raise ValueError(f"{AUTO!r} is not a backend name: it asks the registry to choose")
        old = self._specs.get(spec.name)
        if old is not None and _qualified(old.factory) != _qualified(spec.factory):
            raise ValueError(f"expert backend {spec.name!r} is already registered ({_qualified(old.factory)})")
        self._specs[spec.name] = spec

    def unregister(self, name: str) -> None:
        self._specs.pop(name, None)

    def names(self) -> list[str]:
        """Registered backend names, sorted."""
        self._load()
        return sorted(self._specs)

    def choices(self) -> list[str]:
        """Every value ``model.runtime.expert_backend`` accepts: the names and ``auto``, sorted."""
        self._load()
        return sorted([*self._specs, AUTO])

    def spec(self, name: str) -> ExpertBackendSpec:
        self._load()
        if name == AUTO:
            raise ValueError(f"expert backend {AUTO!r} is resolved when the model is built "
                             "(biomoe.build.build_model); the Experts module needs a concrete name")
        if name not in self._specs:
            raise ValueError(f"unknown expert backend {name!r}; choose one of {self.choices()}")
        return self._specs[name]

    def build(self, name: str) -> ExpertBackend:
        return self.spec(name).factory()

    def by_priority(self) -> list[ExpertBackendSpec]:
        """The backends ``auto`` may choose, highest priority first (ties by name)."""
        self._load()
        ranked = [s for s in self._specs.values() if s.priority is not None]
        return sorted(ranked, key=lambda s: (-s.priority, s.name))

    def resolve(self, name: str, query: ExpertBackendQuery) -> tuple[str, str]:
        """``(backend, reason)`` for ``name`` (a backend or ``auto``) on ``query``.

        ``auto`` takes the highest-priority backend whose check says it runs and is preferred
        here. Its reason is its own, or, for a backend that gives none (``grouped``: it runs
        everywhere), what kept the higher-priority ones out. A named backend that cannot run here
        is a :class:`~biomoe.errors.ConfigError`, never a silent substitute."""
        if name == AUTO:
            return self._resolve_auto(query)
        spec = self.spec(name)
        verdict = spec.available(query)
        if not verdict.runs:
            fallback, _ = self._resolve_auto(query)
            raise ConfigError(f"model.runtime.expert_backend: {name} needs {spec.requires or verdict.reason}; "
                              f"use {fallback} or {AUTO} here")
        return name, "configured"

    def _resolve_auto(self, query: ExpertBackendQuery) -> tuple[str, str]:
        passed_over: list[str] = []
        for spec in self.by_priority():
            verdict = spec.available(query)
            if verdict.runs and verdict.preferred:
                reason = verdict.reason or next((r for r in passed_over if r), "highest priority available")
                return spec.name, reason
            passed_over.append(verdict.reason)
        raise ConfigError(f"model.runtime.expert_backend: {AUTO} found no expert backend for "
                          f"{query.device} and {query.precision}; name one of {', '.join(self.names())}")


def _qualified(factory: Callable) -> str:
    return f"{getattr(factory, '__module__', '?')}.{getattr(factory, '__qualname__', repr(factory))}"


EXPERT_BACKENDS = ExpertBackendRegistry()
"""The one table of expert backends: what ``model.runtime.expert_backend`` may name."""


def register_expert_backend(name: str, *, priority: int | None = None,
                            available: AvailabilityCheck = always_available, requires: str = "",
                            uses_precision_recipe: bool = False) -> Callable:
    """Class decorator: make a backend constructible by name from the config (see
    :class:`ExpertBackendSpec` for the keywords)."""

    def wrap(cls: Callable[[], ExpertBackend]) -> Callable[[], ExpertBackend]:
        EXPERT_BACKENDS.register(ExpertBackendSpec(name, cls, priority, available, requires,
                                                   uses_precision_recipe))
        return cls

    return wrap


def known_backends() -> list[str]:
    """Every registered backend name, and ``auto`` (resolved when the model is built)."""
    return EXPERT_BACKENDS.choices()


def build_backend(name: str) -> ExpertBackend:
    return EXPERT_BACKENDS.build(name)


def resolve_expert_backend(name: str, query: ExpertBackendQuery) -> tuple[str, str]:
    """``(backend, reason)``: see :meth:`ExpertBackendRegistry.resolve`."""
    return EXPERT_BACKENDS.resolve(name, query)


@register_expert_backend("loop")  # the reference: only when named (grouped falls back to it itself)
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


@register_expert_backend("grouped", priority=10)  # runs everywhere: auto's choice when nothing faster is
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
        if not grouped_mm_supported(rows, gate_up, down):
            if not self._warned:
                log.warning("grouped backend: torch._grouped_mm unavailable for %s %s on %s; "
                            "using the per-expert loop", tuple(rows.shape), rows.dtype, rows.device)
                self._warned = True
            return self._fallback(rows, tokens_per_expert, gate_up, down, probs)
        offsets = torch.cumsum(tokens_per_expert, dim=0).to(torch.int32)
        if split_projection(rows, gate_up, down):
            gate, up = gate_up.chunk(2, dim=1)  # views: the gate rows, then the up rows of each expert
            hidden = swiglu_into_gate(grouped_mm(rows, gate.transpose(-2, -1), offsets),
                                      grouped_mm(rows, up.transpose(-2, -1), offsets))
        else:
            hidden = swiglu(_ContiguousGrad.apply(grouped_mm(rows, gate_up.transpose(-2, -1), offsets)))
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

    @property
    def gathers_tokens(self) -> bool:
        return self.backend.gathers_tokens

    def forward_tokens(self, hidden: Tensor, weights: Tensor, plan: TokenPlan) -> Tensor:
        """The weighted sum of every token's experts, for a backend that gathers tokens itself."""
        hidden, gate_up, down = self._operands(hidden)
        return self.backend.over_tokens(hidden, weights, plan, gate_up, down)

    def _operands(self, rows: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Rows in the autocast dtype, and this rank's expert weights in the rows' dtype."""
        device_type = rows.device.type
        if torch.is_autocast_enabled(device_type):  # autocast skips _grouped_mm / custom kernels
            rows = rows.to(torch.get_autocast_dtype(device_type))
        # Under expert parallelism the weights are DTensors sharded over experts; backends compute
        # on this rank's experts only (rows are grouped by *local* expert).
        gate_up, down = _local(self.gate_up_proj), _local(self.down_proj)
        if gate_up.dtype != rows.dtype:
            gate_up, down = gate_up.to(rows.dtype), down.to(rows.dtype)
        return rows, gate_up, down

    def forward(self, rows: Tensor, tokens_per_expert: Tensor, probs: Tensor | None = None) -> Tensor:
        backend = self.backend
        rows, gate_up, down = self._operands(rows)
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
