"""torch.compile applied per block from outside the model (torchtitan style).

Compiling each decoder block (not the whole model) keeps compile time short — every block has the
same structure, so one compiled graph is reused — and lets the compiler fuse the memory-bound glue
around the GEMMs: RMSNorm, rotary embeddings, SwiGLU, routing softmax/top-k and the residual adds.
"""

from __future__ import annotations

import torch
from torch import nn


def apply_compile(model: nn.Module, **compile_kwargs) -> nn.Module:
    """Compile every block of ``model.blocks`` in place.

    ``nn.Module.compile`` (not ``torch.compile(block)``) keeps the module object and its
    state_dict keys, so checkpoints stay interchangeable with uncompiled runs. Compilation is lazy:
    it happens at the first forward, after the TE fast path has swapped its layers in."""
    for block in model.blocks:
        block.compile(**compile_kwargs)
    return model
