"""Figures docs/ quotes from a torch.profiler table that ``python -m bench --profile`` saved: a
contender's GPU time per step, whole or of one operator, read from the table's "Self CUDA" column."""

from __future__ import annotations

import re

from bench.docs_headlines.core import HeadlineSourceError
from bench.shapes import SHAPES

_UNITS = {"s": 1e3, "ms": 1.0, "us": 1e-3}
_SECTION = re.compile(r"^=== profile: (?P<name>.+?) \((?P<steps>\d+) steps\) ===$", re.MULTILINE)


def _section(text: str, contender: str) -> tuple[str, int]:
    """The table of ``contender`` and the steps it covers."""
    heads = list(_SECTION.finditer(text))
    for i, head in enumerate(heads):
        if head["name"] == contender:
            end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
            return text[head.end():end], int(head["steps"])
    raise HeadlineSourceError(f"no profile of {contender!r} in the table")


def _ms(cell: str) -> float:
    match = re.fullmatch(r"([0-9.]+)(s|ms|us)", cell)
    if not match:
        raise HeadlineSourceError(f"{cell!r} is not a profiler time")
    return float(match[1]) * _UNITS[match[2]]


def gpu_ms_per_step(text: str, contender: str) -> float:
    """The contender's whole GPU time per step ("Self CUDA time total" over its steps)."""
    table, steps = _section(text, contender)
    match = re.search(r"^Self CUDA time total: (\S+)$", table, re.MULTILINE)
    if not match:
        raise HeadlineSourceError(f"the profile of {contender!r} has no CUDA total")
    return _ms(match[1]) / steps


def operator_ms_per_step(text: str, contender: str, operator: str) -> float:
    """One operator's own GPU time per step: its row's "Self CUDA" cell over the steps (the ten
    numeric columns are read from the right, since a name may hold spaces)."""
    table, steps = _section(text, contender)
    for line in table.splitlines():
        fields = line.split()
        if len(fields) > 10 and " ".join(fields[:-10]) == operator:
            return _ms(fields[-5]) / steps
    raise HeadlineSourceError(f"the profile of {contender!r} has no {operator!r} row")


def expert_gemm_tflops(text: str, contender: str, shape: str, tokens: int) -> float:
    """The rate of the expert GEMMs (``aten::_grouped_mm``): three matrices per expert, top-k routed
    rows per token, forward and two backward GEMMs, every layer, over their own GPU time."""
    s = SHAPES[shape]
    flops = 3 * 2 * 3 * s.layers * s.top_k * tokens * s.hidden * s.ffn
    return flops / (operator_ms_per_step(text, contender, "aten::_grouped_mm") * 1e-3) / 1e12
