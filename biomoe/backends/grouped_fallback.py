"""Whether the ``grouped`` expert backend will fall back to the per-expert loop, known before it runs.

``grouped`` computes all experts in two ``torch._grouped_mm`` calls, with the group offsets on the
device. Where that op cannot run (see :func:`~biomoe.model.moe.experts.grouped_mm_supported`) it
falls back to the ``loop`` backend, which reads the tokens of every expert on the host: a
device-host sync in every MoE layer of every step. A sync-free fallback exists (each expert over
all rows, :class:`~biomoe.inference.decode_kernels.AllExpertsBackend`) but does E times the work,
so training keeps the loop, and the start-up line says what it costs (:func:`loop_fallback_note`).
"""

from __future__ import annotations

import torch

from biomoe.backends.te.availability import DeviceInfo
from biomoe.model.moe.experts import grouped_mm_supported

__all__ = ["ROWS_DTYPE", "loop_fallback_note"]

ROWS_DTYPE = {"32-true": torch.float32, "32": torch.float32, "64-true": torch.float64,
              "bf16-true": torch.bfloat16, "bf16-mixed": torch.bfloat16, "bf16": torch.bfloat16,
              "16-true": torch.float16, "16-mixed": torch.float16, "16": torch.float16}
"""Lightning precision -> the dtype the experts compute in (autocast casts rows and weights to it)."""

LOOP_FALLBACK = ("falls back to the per-expert loop here (torch._grouped_mm cannot run {why}): "
                 "a device-host sync per MoE layer each step")


def _runs(info: DeviceInfo | None, dtype: torch.dtype, hidden: int, ffn: int) -> tuple[bool, str]:
    if info is not None and (info.capability[0] < 9 or dtype != torch.bfloat16):
        return False, f"{str(dtype).removeprefix('torch.')} on sm {info.capability_str}; it needs bf16 on sm 9.0+"
    # The dtype and alignment rules, asked of empty CPU tensors of the run's shapes (no memory).
    check_dtype = dtype if info is None else torch.bfloat16
    rows = torch.empty(0, hidden, dtype=check_dtype)
    gate_up = torch.empty((), dtype=check_dtype).expand(1, 2 * ffn, hidden)
    down = torch.empty((), dtype=check_dtype).expand(1, hidden, ffn)
    if grouped_mm_supported(rows, gate_up, down):
        return True, ""
    return False, f"for {str(dtype).removeprefix('torch.')} at hidden {hidden}, ffn {ffn}"


def loop_fallback_note(info: DeviceInfo | None, trainer_precision: str | None, hidden: int, ffn: int) -> str | None:
    """What the kernels line adds to ``experts=grouped`` when it will run as the loop, or None
    (it runs grouped, or the dtype is not known yet: no trainer precision)."""
    dtype = ROWS_DTYPE.get(str(trainer_precision)) if trainer_precision is not None else None
    if dtype is None or hidden <= 0 or ffn <= 0:
        return None
    runs, why = _runs(info, dtype, hidden, ffn)
    return None if runs else LOOP_FALLBACK.format(why=why)
