"""torch.compile applied per block from outside the model (torchtitan style).

Compiling each decoder block (not the whole model) keeps compile time short — every block has the
same structure, so one compiled graph is reused — and lets the compiler fuse the memory-bound glue
around the GEMMs: RMSNorm, rotary embeddings, SwiGLU, routing softmax/top-k and the residual adds.
"""

from __future__ import annotations

from torch import nn

from biomoe.compat.inductor import barrier_before_read_back
from biomoe.compat.torch import checkpoint_wrapped
from biomoe.model.documents import varlen_available


def apply_compile(model: nn.Module, **compile_kwargs) -> nn.Module:
    """Compile every block of ``model.blocks`` in place.

    ``nn.Module.compile`` (not ``torch.compile(block)``) keeps the module object and its
    state_dict keys, so checkpoints stay interchangeable with uncompiled runs. Compilation is lazy:
    it happens at the first forward. Transformer Engine calls inside a block are marked
    :func:`~biomoe.compat.torch.eager_when_compiled`, so the compiler splits the block around them
    instead of failing.

    A block wrapped for activation checkpointing is compiled *inside* its wrapper: compiling the
    wrapper puts the checkpoint in the traced region, where dynamo refuses the router's statistics
    updates (a side effect) and runs the whole block uncompiled. Inside, the eager checkpoint
    calls the compiled block in forward and again in the recomputation, with the RNG replayed.

    torch's packed attention kernel is imported on first use (its module imports the compiler);
    here that happens before any tracing, so compiled blocks find it imported.

    Inductor's Triton kernels get a barrier before reading back what they stored across a
    reduction loop (:func:`~biomoe.compat.inductor.barrier_before_read_back`): the compiled MoE
    block's backward fuses the experts' gather into the RMSNorm backward, which stores the summed
    gradient in one loop and reads it back in the next (docs/reliability.md, "Known problem:
    compiled MoE gradients on CUDA")."""
    varlen_available()
    barrier_before_read_back()
    for block in model.blocks:
        checkpoint_wrapped(block).compile(**compile_kwargs)
    return model
