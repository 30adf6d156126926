"""Activation checkpointing applied from outside the model (torchtitan style).

Each decoder block recomputes its activations in the backward pass instead of storing them, so
memory grows with the number of blocks × one block input instead of every intermediate: this is
what lets long genomic contexts (hundreds of kilobases) fit on one GPU.

Under a Transformer Engine FP8 recipe the recomputation must run inside the same recipe as the
forward (same quantised GEMMs, same saved tensors), but torch's checkpoint replays the block during
backward, outside the ``te.autocast`` that wrapped the forward: TE modules then run in bf16 and save
a different set of tensors, and torch raises ``CheckpointError`` (more tensors saved in forward
than in the recomputation, seen at the Mixtral-8x7B shape in fp8-block). TE's own ``checkpoint`` records
the recipe in forward and re-enters it for the recomputation, so blocks use it whenever an FP8
recipe is active, and torch's otherwise (CPU, bf16).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from biomoe.compat.torch import checkpoint_wrapper
from biomoe.compat.transformer_engine import fp8_recipe_active
from biomoe.model.config import ConfigError

RECOMPUTE_UNSAFE_PRECISIONS = ("fp8-delayed",)
"""Recipes whose recomputed gradients did not match a step without checkpointing on a GPU
(docs/gpus.md)."""


def check_precision_for_checkpointing(precision: str) -> None:
    """One-line error for a recipe the recomputation did not reproduce on the GPU.

    Checked on a Hopper GPU (tests/gpu/test_te.py, one step, Hopper's default ``te_fused``
    experts): with fp8-delayed the embedding gradient under
    checkpointing did not match the same step without it, while fp8-block matched. The likely
    cause: delayed scaling updates its scales when the forward's ``te.autocast`` exits; TE's base
    modules restore the forward's scales for the recomputation, but the ``te.ops`` path may not,
    and the recomputation's own autocast exit reduces amax again. Not established; the refusal
    rests on the measurement. Current and block
    scaling derive scales from the tensors themselves."""
    if precision in RECOMPUTE_UNSAFE_PRECISIONS:
        raise ConfigError(f"activation_checkpointing with precision {precision}: its recomputed "
                          "gradients did not match a step without checkpointing; "
                          "use fp8-current or fp8-block, or turn activation_checkpointing off")


def checkpoint_block(function: Callable, *args: Any, preserve_rng_state: bool = True,
                     **kwargs: Any) -> Any:
    """Non-reentrant checkpoint of one block: TE's under an FP8 recipe, torch's otherwise.

    TE's version always caches and replays the RNG state, so ``preserve_rng_state`` only steers
    torch's."""
    if fp8_recipe_active():
        from transformer_engine.pytorch.distributed import checkpoint as te_checkpoint  # optional dependency

        # A plain callable, not the block: TE looks for its layer classes in ``modules()`` and
        # falls back to torch's checkpoint when it finds none, and our TE layers are deliberately
        # not submodules (state_dict keys stay backend-independent).
        return te_checkpoint(lambda *a, **k: function(*a, **k), *args, use_reentrant=False, **kwargs)
    return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False,
                                             preserve_rng_state=preserve_rng_state, **kwargs)


def apply_activation_checkpointing(model: nn.Module) -> nn.Module:
    """Wrap every block of ``model.blocks`` in a non-reentrant checkpoint wrapper (in place).

    The RNG state is saved and replayed only when a block draws random numbers (dropout), so
    that the recomputation sees the forward's masks; otherwise saving it is wasted work."""
    for index, block in enumerate(model.blocks):
        random = any(isinstance(m, nn.Dropout) and m.p > 0 for m in block.modules())
        model.blocks[index] = checkpoint_wrapper(block, checkpoint_fn=checkpoint_block,
                                                 preserve_rng_state=random)
    return model
