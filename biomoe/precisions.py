"""Names of the numeric precisions a model can run in, and what each needs of the GPU.

Kept free of Transformer Engine imports so configuration can be checked anywhere (CPU, CI);
:mod:`biomoe.backends.te.precision` turns these names into TE recipes.

A name is parsed once, where it enters: :class:`~biomoe.model.config.RuntimeConfig` stores the
canonical name (:func:`parse_precision`'s result) after its checks, and everything downstream (the
start-up capability check, the TE recipe, the backend choice) reads that name as it is: a key of
:data:`PRECISIONS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from biomoe.errors import ConfigError

__all__ = ["PRECISIONS", "PrecisionSpec", "canonical_precision", "parse_precision", "precision_problem"]


@dataclass(frozen=True)
class PrecisionSpec:
    """What one precision needs. ``max_capability`` is exclusive (MXFP8 is not on sm_12x)."""

    name: str
    min_capability: tuple[int, int]
    max_capability: tuple[int, int] | None
    alignment: int
    """Rows per expert group must be a multiple of this under the recipe (TE's quantisation tiles)."""
    needs: str
    """Human-readable requirement, used in the README and in error messages."""


PRECISIONS: dict[str, PrecisionSpec] = {
    "bf16": PrecisionSpec("bf16", (0, 0), None, 1, "any device (TE kernels on sm_80+)"),
    "fp8-delayed": PrecisionSpec("fp8-delayed", (8, 9), None, 16, "sm_89+ (Ada, Hopper, Blackwell)"),
    "fp8-current": PrecisionSpec("fp8-current", (8, 9), None, 16, "sm_89+ (Ada, Hopper, Blackwell)"),
    "fp8-block": PrecisionSpec("fp8-block", (9, 0), None, 16, "sm_90+ (Hopper; CUDA >= 12.9)"),
    "mxfp8": PrecisionSpec("mxfp8", (10, 0), (12, 0), 32, "sm_100/sm_103 (Blackwell B200/B300)"),
    "nvfp4": PrecisionSpec("nvfp4", (10, 0), (12, 0), 128, "sm_100/sm_103 (Blackwell B200/B300)"),
}


def canonical_precision(name: Any) -> str:
    """The spelling a name is compared in (case and ``_`` for ``-`` do not matter); not checked."""
    return str(name).strip().lower().replace("_", "-")


def precision_problem(name: Any) -> str | None:
    """The check of a precision field (:mod:`biomoe.checks`): None for a known name, else what is wrong."""
    if canonical_precision(name) in PRECISIONS:
        return None
    return f"{name!r} is unknown; choose one of {', '.join(PRECISIONS)}"


def parse_precision(name: Any, key: str = "precision") -> str:
    """The canonical name (a key of :data:`PRECISIONS`), or a one-line ConfigError naming ``key``."""
    problem = precision_problem(name)
    if problem is not None:
        raise ConfigError(f"{key}: {problem}")
    return canonical_precision(name)
