"""Checkpoint I/O that never leaves a half-written file under a checkpoint's name.

Lightning's default writer opens the final path and streams into it, so a process killed
mid-save leaves a truncated ``last.ckpt``. Here every save goes to a temporary file in the same
directory, is flushed and fsync'ed, and then atomically renamed over the target (``os.replace``),
so the previous checkpoint stays loadable until the new one is complete.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from biomoe.files import atomic_write


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` to ``path`` atomically (same-directory temp file, fsync, rename), with the
    umask's permissions, refusing to replace an input of the running command."""
    with atomic_write(path, "wb") as handle:
        torch.save(obj, handle)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Drop-in ``CheckpointIO`` plugin for single-file checkpoints (``trainer.plugins``)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike,
                        storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO does not take storage_options")
        atomic_torch_save(checkpoint, path)

    def load_checkpoint(self, path: str | os.PathLike, map_location: Any | None = None,
                        weights_only: bool | None = None) -> dict[str, Any]:
        """Lightning's load (``--ckpt_path`` for fit resume, validate, test, predict) with torch's
        weights-only unpickler unless the user trusts checkpoints: Lightning leaves an unset
        ``weights_only`` to torch's default, which an environment variable can turn off. A file
        that needs more is one line naming the object it holds."""
        from biomoe.checkpoint.read import refusal  # registers biomoe's checkpoint types with torch
        from biomoe.checkpoint.safe_types import trusted
        from biomoe.errors import GenomeInputError

        weights_only = bool(weights_only) or not trusted()
        try:
            located = {} if map_location is None else {"map_location": map_location}  # else Lightning's default
            checkpoint = super().load_checkpoint(path, weights_only=weights_only, **located)
        except Exception as exc:
            refused = refusal(exc)
            if refused is None:
                raise
            raise GenomeInputError(path, refused) from None
        return without_partial_loop_state(checkpoint)


LOOPS = ("fit_loop", "validate_loop", "test_loop", "predict_loop")
"""The loop states Lightning restores from ``checkpoint["loops"]``, one per command."""


def without_partial_loop_state(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint whose ``loops`` record lacks a loop (``import-hf`` wrote an empty one) read as one
    that records none: Lightning restores the running command's loop from that record whenever it
    is there, and failed with a KeyError on what it lacked. Without it, the command starts its loop
    afresh, as from a checkpoint of weights alone."""
    loops = checkpoint.get("loops")
    if loops is not None and not (isinstance(loops, dict) and all(key in loops for key in LOOPS)):
        checkpoint = {key: value for key, value in checkpoint.items() if key != "loops"}
    return checkpoint
