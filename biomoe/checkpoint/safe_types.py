"""What a checkpoint may hold beyond tensors and plain containers, and when a user trusts it fully.

Every checkpoint is read with ``torch.load(weights_only=True)``: its pickle may build only
tensors, plain containers and the types listed here, never run a function, so a ``.ckpt`` from
elsewhere cannot run code when it is scored. The list is the one place the types biomoe (and
Lightning, through ``save_hyperparameters``) put into the checkpoints it writes are allowed:
biomoe's config dataclasses (built from their fields, no code of their own runs) and paths (a
``fasta`` given as a ``Path`` through the Python API). Nothing here can execute code; a file that
needs anything else is refused unless the user trusts it (``--trust-checkpoint`` or
``BIOMOE_TRUST_CHECKPOINT=1``), which loads it with the full unpickler.

Importing this module does not import torch (the CLI reads :func:`trusted` before choosing a
command); :func:`allow_checkpoint_types` does.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["TRUST_ENV", "TRUST_OPTION", "allow_checkpoint_types", "checkpoint_types", "trusted", "trusting"]

TRUST_ENV = "BIOMOE_TRUST_CHECKPOINT"
"""Set to 1: load checkpoints with the full unpickler (the file may run code)."""

TRUST_OPTION = "--trust-checkpoint"

_allowed = False


def checkpoint_types() -> list[type]:
    """The classes a checkpoint may instantiate besides torch's defaults (tensors, containers)."""
    from biomoe.model.config import ModelConfig, OptimConfig, RuntimeConfig

    # No DataConfig: the datamodule records its settings as plain keyword values, never the dataclass.
    return [ModelConfig, OptimConfig, RuntimeConfig,
            pathlib.PosixPath, pathlib.PurePosixPath, pathlib.WindowsPath, pathlib.PureWindowsPath]


def allow_checkpoint_types() -> None:
    """Register :func:`checkpoint_types` with torch's weights-only unpickler (process-wide, so
    Lightning's own ``torch.load(weights_only=True)`` of ``--ckpt_path`` accepts them too)."""
    global _allowed
    if not _allowed:
        import torch

        torch.serialization.add_safe_globals(checkpoint_types())
        _allowed = True


def trusted() -> bool:
    """True when the user asked to load checkpoints with the full unpickler."""
    return os.environ.get(TRUST_ENV) == "1"


@contextmanager
def trusting(on: bool = True) -> Iterator[None]:
    """Trust checkpoints (or not) within the block; kept in the environment so that processes a
    run starts (Lightning's distributed launchers) read the same decision."""
    before = os.environ.get(TRUST_ENV)
    if on:
        os.environ[TRUST_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(TRUST_ENV, None)
        else:
            os.environ[TRUST_ENV] = before
