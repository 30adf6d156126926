"""Apply the TE fast path to a built model at start-up, and say (once) what will run.

:func:`prepare` is the single entry point the LightningModule calls: it runs the precision
capability check (failing with one line, or taking the configured fallback, logged), swaps in TE
norm / attention / router / dispatcher where configured (``auto`` = TE when it is usable here),
resolves ``expert_backend: auto``, and returns a :class:`TERuntime` whose :meth:`~TERuntime.autocast`
wraps the model forward. All swaps keep parameters and state_dict keys unchanged, so checkpoints
stay interchangeable with the CPU/torch path.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
from torch import nn

from biomoe.model.config import ConfigError, ModelConfig
from biomoe.model.moe.dispatch import LocalDispatcher
from biomoe.backends.te.availability import DeviceInfo, device_info, te_usable
from biomoe.backends.te.experts import choose_expert_backend, set_auto_precision
from biomoe.backends.te.precision import PrecisionContext, resolve_precision, te_support_checker

log = logging.getLogger("biomoe.backends.te")

COMPONENT_CHOICES = ("auto", "torch", "te")


def want_te(component: str, choice: str, te_ok: bool) -> bool:
    """``auto`` → TE where usable; ``te`` without TE is a configuration error, not a fallback."""
    if choice not in COMPONENT_CHOICES:
        raise ConfigError(f"model.config.{component}={choice!r}; choose one of {', '.join(COMPONENT_CHOICES)}")
    if choice == "te" and not te_ok:
        raise ConfigError(f"model.config.{component}=te needs Transformer Engine and a CUDA GPU "
                          "(pip install biomoe[te]); use auto or torch here")
    return choice == "te" or (choice == "auto" and te_ok)


@dataclass
class TERuntime:
    """What was chosen for this run; enters the precision recipe around the forward."""

    device: DeviceInfo | None
    precision: PrecisionContext
    paths: dict[str, str] = field(default_factory=dict)
    model: nn.Module | None = None
    announce: Callable[[str], None] = log.info
    """Where the one-time messages go (the LightningModule passes Lightning's rank-zero printer)."""
    _confirmed: bool = False

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        with self.precision.autocast():
            yield
        if not self._confirmed:
            self._confirmed = True
            self._log_first_forward()

    def summary(self) -> str:
        where = (f"{self.device.name} (sm {self.device.capability_str})" if self.device else "CPU")
        return f"biomoe fast path on {where}: " + " | ".join(f"{k}={v}" for k, v in self.paths.items())

    def _log_first_forward(self) -> None:
        """Evidence from the first forward that the TE kernels really ran (not just configured)."""
        if self.model is None:
            return
        seen: dict[str, int] = {}
        for module in self.model.modules():
            core = getattr(module, "core_attention", None)
            if core is not None:
                seen["te attention calls"] = seen.get("te attention calls", 0) + core.calls_te
                seen["sdpa fallback calls"] = seen.get("sdpa fallback calls", 0) + core.calls_fallback
            backend = getattr(module, "backend", None)
            fused_path = getattr(backend, "fused_path", None)
            if fused_path is not None:
                seen[f"te_fused: {fused_path}"] = seen.get(f"te_fused: {fused_path}", 0) + 1
            if getattr(backend, "_built_for", None) is not None:
                seen[f"experts built: {backend.name}"] = seen.get(f"experts built: {backend.name}", 0) + 1
        self.announce("biomoe fast path, first forward ran: "
                      + (", ".join(f"{k} x{v}" for k, v in seen.items()) or "torch only"))


def prepare(model: nn.Module, cfg: ModelConfig, device: torch.device,
            announce: Callable[[str], None] = log.info) -> TERuntime:
    """Check precision, install TE components, resolve ``auto``; log the result once."""
    info = device_info(device)
    te_ok = te_usable(device)
    precision = resolve_precision(cfg.precision, cfg.precision_fallback, info, te_ok,
                                  checker=te_support_checker if te_ok else None)
    set_auto_precision(precision)
    ctx = PrecisionContext(precision, use_te=te_ok)
    paths: dict[str, str] = {"precision": precision + (f" ({type(ctx.recipe).__name__})" if ctx.recipe else "")}

    from biomoe.model.moe.layer import MoELayer
    from biomoe.model.transformer import Attention
    from biomoe.backends.te.dispatch import TEPermuteDispatcher
    from biomoe.backends.te.layers import TECoreAttention, use_te_norm
    from biomoe.backends.te.router import use_te_router

    te_norm = want_te("norm_backend", cfg.norm_backend, te_ok)
    te_attn = want_te("attention_backend", cfg.attention_backend, te_ok)
    te_router = want_te("router_backend", cfg.router_backend, te_ok)
    te_dispatch = want_te("dispatch_backend", cfg.dispatch_backend, te_ok)

    expert_backend, reason = cfg.expert_backend, "configured"
    if expert_backend == "auto":
        expert_backend, reason = choose_expert_backend(info, te_ok, precision, cfg.hidden_size,
                                                       cfg.ffn_hidden_size)
    if expert_backend in ("te", "te_fused") and not te_ok:
        raise ConfigError(f"model.config.expert_backend={expert_backend} needs Transformer Engine "
                          "and a CUDA GPU (pip install biomoe[te]); use grouped or auto here")
    if precision != "bf16" and expert_backend not in ("te", "te_fused"):
        log.warning("precision %s: expert_backend=%s does not use TE, so experts compute in bf16; "
                    "only TE modules run in %s", precision, expert_backend, precision)

    for module in model.modules():
        if te_norm and type(module) is nn.RMSNorm:
            use_te_norm(module)
        elif te_attn and isinstance(module, Attention) and module.core_attention is None:
            module.core_attention = TECoreAttention(module.num_heads, module.num_kv_heads, module.head_dim)
        elif isinstance(module, MoELayer):
            if te_router:
                use_te_router(module.router)
            if te_dispatch and type(module.dispatcher) is LocalDispatcher:
                module.dispatcher = TEPermuteDispatcher()  # never replaces an EP dispatcher
            if module.experts.backend_name != expert_backend:
                module.experts.set_backend(expert_backend)  # config (and hparams) keep "auto"

    paths["experts"] = f"{expert_backend} ({reason})"
    paths["router"] = "te fused_topk + fused aux loss" if te_router else "torch"
    paths["dispatch"] = "te moe_permute/unpermute" if te_dispatch else "torch argsort"
    paths["norm"] = "te.RMSNorm" if te_norm else "torch nn.RMSNorm"
    paths["attention"] = "te.DotProductAttention" if te_attn else "torch SDPA"
    runtime = TERuntime(info, ctx, paths, model, announce)
    announce(runtime.summary())
    return runtime
