"""Precision names → Transformer Engine recipes, the start-up capability check, and the autocast.

The config names a precision (``bf16 | fp8-delayed | fp8-current | fp8-block | mxfp8 | nvfp4``),
parsed once where it is read (:class:`~biomoe.model.config.RuntimeConfig` stores the canonical
name); the functions here take that name as it is, a key of :data:`~biomoe.precisions.PRECISIONS`.
At start-up :func:`resolve_precision` checks that this GPU can run it. If not, it raises a
:class:`~biomoe.model.config.ConfigError` whose message is ONE line naming the GPU, its compute
capability and the precisions that do work, unless the config names a fallback, which is then
used and logged. A precision is never downgraded silently.

The recipe is entered with ``te.autocast`` around the model forward only (TE runs the backward
with the recipe recorded in forward). Only TE modules see the recipe: the router and the LM head
are plain torch layers and so stay in bf16/fp32 by construction.

Nothing in this module imports TE at import time; the tables and the message are CPU-testable.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, Iterator

import torch.distributed as dist

from biomoe.errors import ConfigError
from biomoe.compat.transformer_engine import fp8_recipe_active
# parse_precision is imported from here too: the parsing itself is biomoe.precisions'
from biomoe.precisions import PRECISIONS, PrecisionSpec, parse_precision  # noqa: F401
from biomoe.backends.te.availability import DeviceInfo

log = logging.getLogger(__name__)


# Injected in tests to fake TE's own support checks; maps precision name -> (ok, reason).
SupportChecker = Callable[[str], "tuple[bool, str]"]


def capability_allows(name: str, capability: tuple[int, int]) -> bool:
    spec = PRECISIONS[name]
    if capability < spec.min_capability:
        return False
    return spec.max_capability is None or capability < spec.max_capability


def te_support_checker(name: str) -> tuple[bool, str]:
    """TE's own verdict (it also knows CUDA/cuBLAS versions). Call only where TE imports."""
    if name == "bf16":
        return True, ""
    from transformer_engine.pytorch import quantization as q  # optional dependency

    check = {"fp8-delayed": q.check_fp8_support, "fp8-current": q.check_fp8_support,
             "fp8-block": q.check_fp8_block_scaling_support, "mxfp8": q.check_mxfp8_support,
             "nvfp4": q.check_nvfp4_support}[name]
    ok, reason = check()
    return bool(ok), str(reason)


def supported_precisions(info: DeviceInfo | None, te_available: bool,
                         checker: SupportChecker | None = None) -> list[str]:
    """Precisions that can run here. Without a GPU or TE only ``bf16`` (the torch path) works."""
    if info is None or not te_available:
        return ["bf16"]
    works = []
    for name in PRECISIONS:
        if not capability_allows(name, info.capability):
            continue
        if checker is not None and not checker(name)[0]:
            continue
        works.append(name)
    return works


def unsupported_message(name: str, info: DeviceInfo | None, te_available: bool,
                        supported: list[str]) -> str:
    """The one line shown when a precision cannot run: which GPU, its capability, what works."""
    if info is None:
        where = "this machine has no CUDA GPU"
    else:
        where = f"this GPU is {info.name} (compute capability {info.capability_str})"
    if info is not None and not te_available:
        where += " and Transformer Engine is not installed (pip install biomoe[te])"
    return (f"model.runtime.precision={name!r} needs {PRECISIONS[name].needs}, but {where}; "
            f"precisions that work here: {', '.join(supported)} "
            f"(or set model.runtime.precision_fallback)")


def resolve_precision(requested: str, fallback: str | None, info: DeviceInfo | None,
                      te_available: bool, checker: SupportChecker | None = None) -> str:
    """The precision to run, after the start-up check. Raises ConfigError (one line) if impossible.

    ``requested`` and ``fallback`` are canonical names (as RuntimeConfig stores them)."""
    supported = supported_precisions(info, te_available, checker)
    if requested in supported:
        return requested
    message = unsupported_message(requested, info, te_available, supported)
    if fallback is None:
        raise ConfigError(message)
    if fallback not in supported:
        raise ConfigError(f"{message}; the configured fallback {fallback!r} cannot run either")
    log.warning("precision %s cannot run here (%s); using the configured fallback %s",
                requested, message, fallback)
    return fallback


def make_recipe(name: str) -> Any | None:
    """The TE recipe object for a canonical precision name (``None`` for bf16: no quantisation)."""
    if name not in PRECISIONS:  # a bug, not input: names are parsed where they are read
        raise KeyError(f"{name!r} is not a canonical precision name ({', '.join(PRECISIONS)})")
    if name == "bf16":
        return None
    from transformer_engine.common import recipe as r  # optional dependency

    recipes: dict[str, Callable[[], Any]] = {
        # HYBRID = E4M3 forward, E5M2 gradients; max over a 16-step amax history.
        "fp8-delayed": lambda: r.DelayedScaling(fp8_format=r.Format.HYBRID, amax_history_len=16,
                                                amax_compute_algo="max"),
        "fp8-current": lambda: r.Float8CurrentScaling(fp8_format=r.Format.HYBRID),
        "fp8-block": r.Float8BlockScaling,
        "mxfp8": r.MXFP8BlockScaling,
        "nvfp4": r.NVFP4BlockScaling,
    }
    return recipes[name]()


_AMAX_GROUP: Any = None


def set_amax_reduction_group(group: Any) -> None:
    """Hook for the distributed strategy: the process group over which delayed-scaling amaxes are
    reduced. Every rank that holds a replica of the same weights must agree on the scales, so this
    is the data-parallel group (for experts under EP: the ranks that hold the same experts)."""
    global _AMAX_GROUP
    _AMAX_GROUP = group


def amax_reduction_group() -> Any:
    """The configured group, else WORLD when torch.distributed runs with > 1 rank, else None."""
    if _AMAX_GROUP is not None:
        return _AMAX_GROUP
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist.group.WORLD
    return None


class PrecisionContext:
    """Enters ``te.autocast`` with the resolved recipe; a no-op for bf16 or without TE.

    ``name`` is canonical: :func:`resolve_precision`'s result."""

    def __init__(self, name: str, use_te: bool) -> None:
        self.name = name
        self.use_te = use_te
        self.recipe = make_recipe(self.name) if use_te else None

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        if not self.use_te or self.recipe is None:
            yield
            return
        import transformer_engine.pytorch as te  # optional dependency

        with te.autocast(enabled=True, recipe=self.recipe,
                         amax_reduction_group=amax_reduction_group()):
            yield

    def __repr__(self) -> str:
        return f"PrecisionContext({self.name}, recipe={type(self.recipe).__name__ if self.recipe else None})"


def active_alignment() -> int:
    """Row alignment the active TE recipe needs per expert group (1 outside an FP8 autocast)."""
    if not fp8_recipe_active():
        return 1
    from transformer_engine.pytorch.quantization import (FP8GlobalStateManager,  # optional dependency
                                                         get_align_size_for_quantization)

    return int(get_align_size_for_quantization(FP8GlobalStateManager.get_fp8_recipe()))
