"""Choose every kernel of a run once, before the model is built: precision, TE or torch per layer.

:func:`select_backends` is the only place that decides. It runs the precision capability check
(one-line error, or the configured fallback, logged), turns ``auto`` into TE where TE is usable on
this device, resolves ``expert_backend`` in the expert-backend registry (``auto``: the
highest-priority backend whose check says it runs and is preferred here), and returns the
:class:`~biomoe.model.backends.LayerBackends` the model is constructed with plus the precision
context entered around each forward.

Transformer Engine is imported only where a choice can take it: a run whose every layer is
``torch``, whose experts are biomoe's torch backends and whose precision is ``bf16`` never asks
whether TE is there (importing it registers its custom ops: seconds), and a TE layer's module is
imported only when that layer is chosen.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from biomoe.backends.grouped_fallback import loop_fallback_note
from biomoe.backends.te.availability import TE_LIBRARY, DeviceInfo, device_info, te_import_error, te_usable
from biomoe.backends.te.precision import PrecisionContext, resolve_precision, te_support_checker
from biomoe.errors import ConfigError
from biomoe.model.backends import LayerBackends
from biomoe.model.config import LAYER_BACKEND_FIELDS, ModelConfig, RuntimeConfig
from biomoe.model.moe.experts import EXPERT_BACKENDS, ExpertBackendQuery, resolve_expert_backend

log = logging.getLogger(__name__)


@dataclass
class BackendSelection:
    """What one run uses: the model's layer factories, the precision, and a readable summary."""

    backends: LayerBackends
    precision: PrecisionContext
    device: DeviceInfo | None
    paths: dict[str, str] = field(default_factory=dict)
    expert_sizes: tuple[int, int] = (0, 0)
    """``(hidden_size, ffn_hidden_size)``: with the trainer's precision they decide whether the
    ``grouped`` experts will run as the per-expert loop (:mod:`~biomoe.backends.grouped_fallback`)."""

    def summary(self, trainer_precision: str | None = None) -> str:
        """One line; with ``trainer_precision`` (Lightning's, e.g. ``32-true``) the precision entry
        says what computes: without Transformer Engine the TE recipe is not used at all, and the
        trainer's precision is all there is (fp32 on a CPU run with ``32-true``)."""
        where = f"{self.device.name} (sm {self.device.capability_str})" if self.device else "CPU"
        paths = dict(self.paths)
        if not self.precision.use_te:
            paths["precision"] = (TRAINER_PRECISIONS.get(str(trainer_precision), str(trainer_precision))
                                  + f" (trainer.precision={trainer_precision}; no TE recipe)"
                                  if trainer_precision is not None else "no TE recipe (trainer.precision decides)")
        elif trainer_precision is not None:
            paths["precision"] += f" in TE layers, trainer.precision={trainer_precision}"
        if self.backends.experts == "grouped":
            note = loop_fallback_note(self.device, trainer_precision, *self.expert_sizes)
            if note is not None:
                paths["experts"] += f"; {note}"
        return f"biomoe kernels on {where}: " + " | ".join(f"{k}={v}" for k, v in paths.items())


TRAINER_PRECISIONS = {"32-true": "fp32", "32": "fp32", "64-true": "fp64", "bf16-true": "bf16",
                      "bf16-mixed": "bf16 autocast, fp32 weights", "16-true": "fp16",
                      "16-mixed": "fp16 autocast, fp32 weights", "transformer-engine": "TE plugin"}
"""Lightning precision names -> what computes."""


def auto_layers_take_te(runtime: RuntimeConfig) -> bool:
    """Whether ``auto`` layer kernels (norm, attention, router, dispatch) may be TE's. Not for
    compiled bf16 blocks: ``torch.compile`` fuses the torch layers' memory-bound work with their
    neighbours but must break its graph at every TE call, and so each compiled step of the corpus
    recipe ran faster on torch's layers, dense and MoE, at both widths measured (docs/benchmarks.md,
    "The MoE step against its dense twin"). Under an FP8/FP4 recipe TE computes the GEMMs,
    and its layers stay the choice."""
    return not (runtime.compile and runtime.precision == "bf16")


def want_te(component: str, choice: str, te_ok: bool, auto_takes_te: bool, te_broken: str | None = None) -> bool:
    """``auto`` → TE where usable (and ``auto_takes_te``); ``te`` without TE is a configuration
    error, not a fallback (naming why an installed TE cannot be used, ``te_broken``)."""
    if choice == "te" and not te_ok:
        raise ConfigError(f"model.runtime.{component}: te needs Transformer Engine and a CUDA GPU "
                          "(pip install biomoe[te]); use auto or torch here" + _broken_note(te_broken))
    return choice == "te" or (choice == "auto" and te_ok and auto_takes_te)


_NOT_INSTALLED = "Transformer Engine is not installed (pip install biomoe[te])"


def _broken_note(te_broken: str | None) -> str:
    return f" (Transformer Engine is installed but fails to import: {te_broken})" if te_broken else ""


def te_broken_reason(runtime: RuntimeConfig, device: torch.device | None) -> str | None:
    """Why an installed Transformer Engine cannot be used on this CUDA device, or None (usable,
    not installed, or not asked about: a CPU run, or a ``runtime`` no choice of which takes TE)."""
    if not may_use_te(runtime) or not torch.cuda.is_available():
        return None
    if device is not None and torch.device(device).type != "cuda":
        return None
    return te_import_error()


def expert_query(info: DeviceInfo | None, te_ok: bool, precision: str, hidden: int, ffn: int,
                 device: torch.device | None = None) -> ExpertBackendQuery:
    """The run as the expert-backend registry sees it; TE is probed here, once, so that no
    backend's check has to import it."""
    if device is None:
        device = torch.device("cuda" if info is not None else "cpu")
    return ExpertBackendQuery(device=torch.device(device), capability=info.capability if info else None,
                              precision=precision, hidden_size=hidden, ffn_hidden_size=ffn,
                              libraries=frozenset({TE_LIBRARY}) if te_ok else frozenset())


TORCH_EXPERT_BACKENDS = frozenset({"loop", "grouped", "quack"})
"""biomoe's expert backends that compute without Transformer Engine (their checks never ask for TE)."""


def may_use_te(runtime: RuntimeConfig) -> bool:
    """Whether any choice of ``runtime`` can take Transformer Engine (else TE is not probed)."""
    layer_choices = ("te", "auto") if auto_layers_take_te(runtime) else ("te",)
    return (any(getattr(runtime, name) in layer_choices for name in LAYER_BACKEND_FIELDS)
            or runtime.expert_backend not in TORCH_EXPERT_BACKENDS
            or runtime.precision != "bf16")  # canonical: RuntimeConfig parsed it


def select_backends(cfg: ModelConfig, runtime: RuntimeConfig,
                    device: torch.device | None) -> BackendSelection:
    """Resolve ``runtime`` for ``device`` (CPU: the torch reference path everywhere)."""
    info = device_info(device)
    te_ok = may_use_te(runtime) and te_usable(device)
    te_broken = None if te_ok else te_broken_reason(runtime, device)
    try:
        precision = resolve_precision(runtime.precision, runtime.precision_fallback, info, te_ok,
                                      checker=te_support_checker if te_ok else None)
        context = PrecisionContext(precision, use_te=te_ok)
        query = expert_query(info, te_ok, precision, cfg.hidden_size, cfg.ffn_hidden_size, device)
        expert_backend, reason = resolve_expert_backend(runtime.expert_backend, query)
    except ConfigError as err:
        if te_broken is None:
            raise
        message = str(err)
        if _NOT_INSTALLED in message:  # the precision check's words for "no TE"
            message = message.replace(_NOT_INSTALLED, "Transformer Engine is installed but fails to import "
                                                      f"({te_broken})")
        else:
            message += _broken_note(te_broken)
        raise ConfigError(message) from None
    if precision != "bf16" and not EXPERT_BACKENDS.spec(expert_backend).uses_precision_recipe:
        log.warning("precision %s: expert_backend=%s does not use TE, so experts compute in bf16; "
                    "only TE modules run in %s", precision, expert_backend, precision)

    auto_te = auto_layers_take_te(runtime)
    te_norm = want_te("norm_backend", runtime.norm_backend, te_ok, auto_te, te_broken)
    te_attention = want_te("attention_backend", runtime.attention_backend, te_ok, auto_te, te_broken)
    te_router = want_te("router_backend", runtime.router_backend, te_ok, auto_te, te_broken)
    te_dispatch = want_te("dispatch_backend", runtime.dispatch_backend, te_ok, auto_te, te_broken)
    kwargs: dict = {"experts": expert_backend}
    # each TE layer's module imported only when it is chosen (they import only torch until they run)
    if te_norm:
        from biomoe.backends.te.layers import TERMSNorm

        kwargs["norm"] = TERMSNorm
    if te_attention:
        from biomoe.backends.te.layers import TECoreAttention

        kwargs["core_attention"] = TECoreAttention
    if te_router:
        from biomoe.backends.te.router import TEFusedTopKRouter

        kwargs["router"] = TEFusedTopKRouter
    if te_dispatch:
        from biomoe.backends.te.dispatch import TEPermuteDispatcher

        kwargs["dispatcher"] = TEPermuteDispatcher

    recipe = f" ({type(context.recipe).__name__})" if context.recipe is not None else ""
    paths = {
        "precision": precision + recipe,
        "experts": f"{expert_backend} ({reason})",
        "router": "te fused_topk + fused aux loss" if te_router else "torch",
        "dispatch": "te moe_permute/unpermute" if te_dispatch else "torch argsort",
        "norm": "te.RMSNorm" if te_norm else "torch nn.RMSNorm",
        "attention": "te.DotProductAttention" if te_attention else "torch SDPA",
    }
    if te_broken is not None:  # auto chose torch's kernels where TE's would have run
        paths["te"] = f"installed but fails to import, torch kernels used ({te_broken})"
    if not auto_te and any(getattr(runtime, name) == "auto" for name in LAYER_BACKEND_FIELDS):
        paths["layers"] = "auto layers on torch (compiled bf16 blocks run faster on them)"
    return BackendSelection(LayerBackends(**kwargs), context, info, paths, (cfg.hidden_size, cfg.ffn_hidden_size))
