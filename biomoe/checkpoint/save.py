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
