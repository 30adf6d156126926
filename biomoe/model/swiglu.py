"""The SwiGLU activation, and its form for a forward that keeps no autograd graph.

Every SwiGLU projection in biomoe stacks the gate rows over the up rows in one weight
(``[2F, H]``, or ``[E, 2F, H]`` for experts), so training runs one GEMM and checkpoints have one
layout. Splitting that GEMM's output gives two halves whose rows are strided: torch's elementwise
kernels then take their generic (non-vectorised) path, a large share of a bf16 scoring forward's
GPU time. Without autograd the two halves can be computed by two GEMMs into contiguous buffers
instead, and the activation runs in place on them, which is faster (measured: docs/benchmarks.md,
"Kernels of the use commands").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def swiglu(gate_up_out: Tensor) -> Tensor:
    """``silu(gate) · up`` of one GEMM's output ``[..., 2F]`` (gate first)."""
    gate, up = gate_up_out.chunk(2, dim=-1)
    return F.silu(gate) * up


def swiglu_into_gate(gate: Tensor, up: Tensor) -> Tensor:
    """``silu(gate) · up`` written over ``gate`` (two contiguous GEMM outputs, no autograd)."""
    return F.silu(gate, inplace=True).mul_(up)


def split_projection(*tensors: Tensor) -> bool:
    """Whether a SwiGLU projection may run as two GEMMs and an in-place activation: no tensor
    needs a gradient (in-place ops would break autograd) and nothing is being compiled (the
    compiler fuses the activation over the strided halves of one GEMM itself)."""
    if torch.compiler.is_compiling():
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))
