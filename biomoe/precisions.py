"""Names of the numeric precisions a model can run in, and what each needs of the GPU.

Kept free of Transformer Engine imports so configuration can be checked anywhere (CPU, CI);
:mod:`biomoe.backends.te.precision` turns these names into TE recipes.
"""

from __future__ import annotations

from dataclasses import dataclass

from biomoe.errors import ConfigError


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

def parse_precision(name: str, key: str = "precision") -> str:
    """Normalise a precision name (case, ``_`` for ``-``) or raise a one-line ConfigError."""
    normalised = str(name).strip().lower().replace("_", "-")
    if normalised not in PRECISIONS:
        raise ConfigError(f"{key}: {name!r} is unknown; choose one of {', '.join(PRECISIONS)}")
    return normalised
