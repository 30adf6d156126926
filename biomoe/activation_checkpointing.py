"""Activation checkpointing applied from outside the model (torchtitan style).

Each decoder block recomputes its activations in the backward pass instead of storing them, so
memory grows with the number of blocks × one block input instead of every intermediate: this is
what lets long genomic contexts (hundreds of kilobases) fit on one GPU.
"""

from __future__ import annotations

from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper


def apply_activation_checkpointing(model: nn.Module) -> nn.Module:
    """Wrap every block of ``model.blocks`` in a non-reentrant checkpoint wrapper (in place).

    The RNG state is saved and replayed only when a block draws random numbers (dropout), so
    that the recomputation sees the forward's masks; otherwise saving it is wasted work."""
    for index, block in enumerate(model.blocks):
        random = any(isinstance(m, nn.Dropout) and m.p > 0 for m in block.modules())
        model.blocks[index] = checkpoint_wrapper(block, preserve_rng_state=random)
    return model
