"""Expert backends on Transformer Engine: ``te`` (two GroupedLinear) and ``te_fused`` (te.ops).

Weights: both backends compute with the :class:`~biomoe.model.moe.experts.Experts` stacked parameters
``gate_up_proj [E, 2F, H]`` and ``down_proj [E, H, F]`` and own no weights of their own, so
checkpoints move freely between ``loop``, ``grouped``, ``te`` and ``te_fused``. TE's modules
normally own ``weight{i}`` parameters; here they are built on the meta device, their weight
parameters are deleted, and each call hands them ``stacked[i]`` views. The views are autograd
inputs of TE's own autograd functions, so weight gradients flow back into the stacked parameter
and FP8 quantisation of the weights happens inside TE exactly as for its own parameters.

- ``te``: ``GroupedLinear(gate_up) → SwiGLU (torch) → GroupedLinear(down)``; combine applies the
  routing weights.
- ``te_fused``: ``te.ops.Sequential(GroupedLinear, ScaledSwiGLU, GroupedLinear)`` with the routing
  weights as ScaledSwiGLU's per-row scale (``applies_probs=True``). TE fuses it into one CuTe
  kernel only on Blackwell with MXFP8/NVFP4 and ``glu_interleave_size=32``; elsewhere it runs
  unfused. Our gate-then-up layout *is* TE's non-interleaved SwiGLU layout (SiLU on the first
  half), so on Hopper no permutation is needed; where fusion is possible the rows are permuted
  into 32-row interleaved blocks on the fly (a copy per step, tested against ``loop``).

FP8 needs every expert's row group to be a multiple of the recipe's alignment (16 per-tensor and
block FP8, 32 MXFP8, 128 NVFP4). A TE dispatcher pads already; for any other dispatcher the
backend pads the groups itself with zero rows and drops them afterwards.

Importing this module never imports TE; the backends do so on first call. It registers both in
:data:`~biomoe.model.moe.experts.EXPERT_BACKENDS`, with the checks that say when ``auto`` takes
them (:func:`te_availability`, :func:`te_fused_availability`); :mod:`biomoe.backends` imports it.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Any

import torch
from torch import Tensor

from biomoe.model.moe.experts import (Availability, ExpertBackend, ExpertBackendQuery, register_expert_backend,
                                      resolve_expert_backend)
from biomoe.model.swiglu import swiglu
from biomoe.backends.te.availability import TE_LIBRARY, DeviceInfo, device_info
from biomoe.backends.te.precision import active_alignment, fp8_recipe_active
from biomoe.compat.torch import eager_when_compiled
from biomoe.compat.transformer_engine import (WEIGHT_TENSORS_HOOK, drop_parameters, forward_op_names, fusers,
                                               set_fuser_parameters)

log = logging.getLogger(__name__)

FUSED_MLP_CAPABILITY_MAJOR = 10
GLU_INTERLEAVE = 32


# ------------------------------------------------------------------------------ row padding
class GroupPadding:
    """Pads each expert's row group to a multiple of ``align`` (zero rows) and undoes it.

    Everything on the device is computed there from the counts tensor, so no split list is copied
    from the host; the one read of the counts to the host is the list TE's grouped GEMM takes
    anyway (and the padded buffer's size). ``dest`` maps every real row to its place in the padded
    buffer; padding rows stay zero, so they add nothing to weight gradients.
    """

    def __init__(self, counts: Tensor, align: int) -> None:
        counts = counts.to(torch.int64)
        host_counts = [int(c) for c in counts.tolist()]
        self.padded_counts = [int(math.ceil(c / align) * align) for c in host_counts]
        self.total = sum(host_counts)
        self.padded_total = sum(self.padded_counts)
        self.padded_splits = (counts + align - 1) // align * align
        src = torch.cumsum(counts, 0) - counts
        dst = torch.cumsum(self.padded_splits, 0) - self.padded_splits
        shift = torch.repeat_interleave(dst - src, counts, output_size=self.total)
        self.dest = torch.arange(self.total, device=counts.device) + shift

    @property
    def needed(self) -> bool:
        return self.padded_total != self.total

    def pad(self, rows: Tensor) -> Tensor:
        out = rows.new_zeros(self.padded_total, *rows.shape[1:])
        return out.index_copy(0, self.dest, rows)

    def unpad(self, rows: Tensor) -> Tensor:
        return rows.index_select(0, self.dest)


def _empty_result(rows: Tensor, gate_up: Tensor, down: Tensor) -> Tensor:
    """No routed rows: an empty output that still depends on the weights (zero grads, not None)."""
    return rows.new_zeros(0, down.shape[1]) + 0 * (gate_up.sum() + down.sum()).to(rows.dtype)


def interleave_glu_rows(gate_up: Tensor, block: int = GLU_INTERLEAVE) -> Tensor:
    """``[E, 2F, H]`` gate-then-up → TE's block-interleaved ``[g0:b, u0:b, gb:2b, ub:2b, ...]``."""
    e, two_f, h = gate_up.shape
    f = two_f // 2
    return gate_up.view(e, 2, f // block, block, h).transpose(1, 2).reshape(e, two_f, h)


# ----------------------------------------------------------------- TE modules fed our weights
@functools.lru_cache(maxsize=None)
def _stacked_grouped_linear_class() -> type:
    """Subclass of ``te.GroupedLinear`` whose ``weight{i}`` come from a stacked tensor per call."""
    import transformer_engine.pytorch as te  # optional dependency

    class StackedGroupedLinear(te.GroupedLinear):
        """``te.GroupedLinear`` without parameters of its own (ours are passed to forward)."""

        def __init__(self, num_gemms: int, in_features: int, out_features: int,
                     device: torch.device, dtype: torch.dtype) -> None:
            super().__init__(num_gemms, in_features, out_features, bias=False, device="meta",
                             params_dtype=dtype)
            drop_parameters(self, [f"weight{i}" for i in range(num_gemms)])
            for i in range(num_gemms):
                # bias=False leaves empty placeholder tensors; they must live on the real device.
                setattr(self, f"bias{i}", torch.empty(0, dtype=dtype, device=device))
            self._stacked: Tensor | None = None

        def stacked_weights(self) -> list[Tensor]:
            assert self._stacked is not None, "StackedGroupedLinear called without weights"
            return list(self._stacked.unbind(0))

        def forward(self, inp: Tensor, m_splits: Any, stacked: Tensor) -> Tensor:  # type: ignore[override]
            self._stacked = stacked
            try:
                return super().forward(inp, m_splits)
            finally:
                self._stacked = None

    setattr(StackedGroupedLinear, WEIGHT_TENSORS_HOOK, StackedGroupedLinear.stacked_weights)
    return StackedGroupedLinear


class _TEBackendBase(ExpertBackend):
    """Shared plumbing: lazy TE module construction, zero-row and FP8 padding handling."""

    def __init__(self) -> None:
        self._built_for: tuple | None = None

    def _ensure_built(self, rows: Tensor, gate_up: Tensor, down: Tensor) -> None:
        key = (rows.device, rows.dtype, tuple(gate_up.shape), tuple(down.shape))
        if self._built_for != key:
            self._build(rows.device, rows.dtype, gate_up.shape[0], gate_up.shape[2], down.shape[2])
            self._built_for = key

    def _build(self, device: torch.device, dtype: torch.dtype, experts: int, hidden: int,
               ffn: int) -> None:
        raise NotImplementedError

    def _compute(self, rows: Tensor, splits: Tensor, gate_up: Tensor, down: Tensor,
                 probs: Tensor | None) -> Tensor:
        raise NotImplementedError

    @eager_when_compiled  # TE modules (and their host-side splits) run eager inside compiled blocks
    def __call__(self, rows, tokens_per_expert, gate_up, down, probs=None):
        if not rows.is_cuda:
            raise RuntimeError(f"expert backend {self.name!r} needs CUDA tensors (got {rows.device}); "
                               "use expert_backend: grouped or auto on CPU")
        if rows.shape[0] == 0:
            return _empty_result(rows, gate_up, down)
        self._ensure_built(rows, gate_up, down)
        align = active_alignment()
        padding = None
        if align > 1:
            padding = GroupPadding(tokens_per_expert, align)
            if not padding.needed:
                padding = None
        if padding is not None:
            rows = padding.pad(rows)
            probs = padding.pad(probs) if probs is not None else None
            splits = padding.padded_splits
        else:
            splits = tokens_per_expert.to(torch.int64)
        out = self._compute(rows, splits, gate_up, down, probs)
        return padding.unpad(out) if padding is not None else out


# ---------------------------------------------------------- when auto takes a TE backend
TE_REQUIREMENT = "Transformer Engine and a CUDA GPU (pip install biomoe[te])"
TE_PRIORITY, TE_FUSED_PRIORITY = 20, 30
"""Above ``grouped`` (10): where TE runs and is preferred, it is faster.

From measurements on one H200, forward + backward (figures and commands: docs/benchmarks.md,
"Figures behind decisions in the code"): at Mixtral expert shapes ``torch._grouped_mm`` and TE's
bf16 grouped GEMMs run at about the same rate, and ``grouped`` needs no host sync, so bf16 →
``grouped``. TE's FP8 grouped GEMMs (current/delayed) were never slower than bf16 and pull ahead
at large routed batches, so an FP8 precision → ``te`` (the only way experts compute in FP8 at
all); on Hopper the ``te.ops`` path (``te_fused``, unfused there) measured faster end to end than
``te`` for all three FP8 recipes on mixtral-2layer, so Hopper + FP8 → ``te_fused``. On
Blackwell with MXFP8/NVFP4 the ops path fuses into one kernel → ``te_fused``. Without CUDA or
TE → ``grouped`` (which itself falls back to the loop where ``_grouped_mm`` cannot run).
"""


def _te_refusal(query: ExpertBackendQuery) -> Availability | None:
    """Why neither TE backend is auto's choice here, or None when an FP8/FP4 recipe runs on TE."""
    if query.capability is None:
        return Availability.no("no CUDA device")
    if TE_LIBRARY not in query.libraries:
        return Availability.no("Transformer Engine not installed")
    if query.precision == "bf16":
        return Availability.not_preferred("bf16: torch._grouped_mm is as fast and needs no host sync "
                                          "(docs/benchmarks.md, auto expert backend)")
    return None


def te_availability(query: ExpertBackendQuery) -> Availability:
    """``te``: every FP8/FP4 recipe where ``te_fused`` is not the faster choice."""
    refusal = _te_refusal(query)
    if refusal is not None:
        return refusal
    return Availability.yes(f"{query.precision}: TE's FP8 grouped GEMMs, faster than bf16's")


def te_fused_availability(query: ExpertBackendQuery) -> Availability:
    """``te_fused``: Blackwell with MXFP8/NVFP4 (one fused kernel), and Hopper under any FP8 recipe."""
    refusal = _te_refusal(query)
    if refusal is not None:
        return refusal
    major, minor = query.capability
    fusable = (major == FUSED_MLP_CAPABILITY_MAJOR and query.precision in ("mxfp8", "nvfp4")
               and query.hidden_size % 64 == 0 and query.ffn_hidden_size % 64 == 0)
    if fusable:
        return Availability.yes(f"{query.precision} on sm_{major}{minor}: fused GroupedMLP kernel")
    if major == 9:
        return Availability.yes(f"{query.precision} on Hopper: te.ops grouped MLP (unfused), measured fastest "
                                "(docs/benchmarks.md, auto expert backend)")
    return Availability.not_preferred(f"{query.precision} on sm_{major}{minor}: te.ops does not fuse the "
                                      "grouped MLP here")


@register_expert_backend("te", priority=TE_PRIORITY, available=te_availability, requires=TE_REQUIREMENT,
                         uses_precision_recipe=True)
class TEGroupedLinearBackend(_TEBackendBase):
    """Two ``te.GroupedLinear`` (gate-up, down) with a torch SwiGLU between them."""

    name = "te"

    def _build(self, device, dtype, experts, hidden, ffn):
        cls = _stacked_grouped_linear_class()
        self.fc1 = cls(experts, hidden, 2 * ffn, device, dtype)
        self.fc2 = cls(experts, ffn, hidden, device, dtype)
        log.info("te experts: te.GroupedLinear x2 (E=%d, H=%d, F=%d, %s)", experts, hidden, ffn, dtype)

    def _compute(self, rows, splits, gate_up, down, probs):
        # Host list: the legacy GroupedLinear path calls .tolist() on GPU splits anyway.
        m_splits = splits.tolist()
        hidden = swiglu(self.fc1(rows, m_splits, gate_up))
        return self.fc2(hidden, m_splits, down)


@register_expert_backend("te_fused", priority=TE_FUSED_PRIORITY, available=te_fused_availability,
                         requires=TE_REQUIREMENT, uses_precision_recipe=True)
class TEFusedMLPBackend(_TEBackendBase):
    """``te.ops.Sequential(GroupedLinear, ScaledSwiGLU, GroupedLinear)``; routing weights inside."""

    name = "te_fused"
    applies_probs = True

    def __init__(self, interleave: bool | None = None) -> None:
        super().__init__()
        self.interleave = interleave  # None: decide from the device (only Blackwell can fuse)
        self.fused_path: str = "not run"

    def _build(self, device, dtype, experts, hidden, ffn):
        import transformer_engine.pytorch as te  # optional dependency
        from transformer_engine.pytorch import ops

        info = device_info(device)
        if self.interleave is None:
            self.interleave = bool(info and info.capability[0] == FUSED_MLP_CAPABILITY_MAJOR
                                   and ffn % GLU_INTERLEAVE == 0)
        fc1 = ops.GroupedLinear(experts, hidden, 2 * ffn, bias=False, device="meta", dtype=dtype)
        act = ops.ScaledSwiGLU(glu_interleave_size=GLU_INTERLEAVE if self.interleave else None)
        fc2 = ops.GroupedLinear(experts, ffn, hidden, bias=False, device="meta", dtype=dtype)
        for op in (fc1, fc2):
            drop_parameters(op, [f"weight{i}" for i in range(experts)])
        self.ops = (fc1, act, fc2)
        self.mlp = ops.Sequential(fc1, act, fc2)
        self.num_experts = experts
        self._device_info = info
        del te
        log.info("te_fused experts: te.ops GroupedLinear→ScaledSwiGLU(interleave=%s)→GroupedLinear "
                 "(E=%d, H=%d, F=%d, %s)", GLU_INTERLEAVE if self.interleave else None,
                 experts, hidden, ffn, dtype)

    def _install_weights(self, gate_up: Tensor, down: Tensor) -> None:
        """Hand the ops this step's weight views and make them autograd inputs of the fuser.

        te.ops reads ``op.weight{i}`` and passes the fuser's flat parameter list into its
        autograd function, returning one gradient per entry; both must be our views."""
        fc1, _, fc2 = self.ops
        w1 = list(gate_up.unbind(0))
        w2 = list(down.unbind(0))
        for op, ws in ((fc1, w1), (fc2, w2)):
            for i, w in enumerate(ws):
                op.__dict__[f"weight{i}"] = w
        for fuser in fusers(self.mlp):
            set_fuser_parameters(fuser, {id(fc1): w1, id(fc2): w2})

    def _compute(self, rows, splits, gate_up, down, probs):
        if probs is None:
            raise RuntimeError("te_fused applies routing weights itself and needs per-row probs")
        if self._ops_lack_recipe():
            # Measured on an H200 with TE 2.20.2: the te.ops grouped GEMM finds no cuBLAS
            # algorithm for Float8BlockScaling on sm_90 (te.GroupedLinear does). Same precision,
            # other kernels; said once in the log, never silently.
            if self.fused_path == "not run":
                self.fused_path = ("te.GroupedLinear x2 + scaled SwiGLU (te.ops has no sm_90 "
                                   "Float8BlockScaling grouped GEMM in TE 2.20.2)")
                log.warning("te_fused: %s", self.fused_path)
            out = self._module_path(rows, splits.tolist(), gate_up, down)
            return out * probs.unsqueeze(-1).to(out.dtype)
        if self.interleave:
            gate_up = interleave_glu_rows(gate_up)
        self._install_weights(gate_up, down)
        out = self.mlp(rows, splits, probs.to(rows.dtype), splits)
        self._record_path()
        return out

    def _ops_lack_recipe(self) -> bool:
        if not fp8_recipe_active():
            return False
        from transformer_engine.pytorch.quantization import FP8GlobalStateManager  # optional dependency

        recipe = FP8GlobalStateManager.get_fp8_recipe()
        on_hopper = self._device_info is not None and self._device_info.capability[0] == 9
        return on_hopper and recipe.float8_block_scaling()

    def _module_path(self, rows: Tensor, m_splits: list[int], gate_up: Tensor, down: Tensor) -> Tensor:
        if not hasattr(self, "_fallback"):
            self._fallback = TEGroupedLinearBackend()
        fb = self._fallback
        fb._ensure_built(rows, gate_up, down)
        return fb.fc2(swiglu(fb.fc1(rows, m_splits, gate_up)), m_splits, down)

    def _record_path(self) -> None:
        """Which kernels ran: the fused CuTe GroupedMLP or the unfused ops (logged once)."""
        if self.fused_path != "not run":
            return
        names = []
        for fuser in fusers(self.mlp):
            names += forward_op_names(fuser)
        fused = any("GroupedMLP" in n for n in names)
        self.fused_path = ("fused " if fused else "unfused ") + "+".join(names)
        log.info("te_fused forward ran: %s", self.fused_path)


# ------------------------------------------------------------------------------- backend: auto
def choose_expert_backend(info: DeviceInfo | None, te_available: bool, precision: str,
                          hidden: int, ffn: int) -> tuple[str, str]:
    """What ``expert_backend: auto`` resolves to for this device and precision: (name, reason).

    The registry decides (:func:`~biomoe.model.moe.experts.resolve_expert_backend`, by priority
    over each backend's availability check); this only describes the device as its query.
    """
    # imported here: biomoe.backends.select imports the biomoe.backends package, which imports this module
    from biomoe.backends.select import expert_query

    return resolve_expert_backend("auto", expert_query(info, te_available, precision, hidden, ffn))
