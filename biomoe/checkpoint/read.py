"""Reading a checkpoint file: the one place biomoe calls ``torch.load`` on a user's checkpoint.

Every reader of a checkpoint (commands, callbacks, the model card, the run-folder resolver) goes
through :func:`read_checkpoint`, so how a file is opened (on the CPU, memory-mapped when torch's
zip format allows it, so that reading the hyper-parameters of a large file costs next to nothing)
and how a failure is reported is decided here once.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping
from typing import Any

import torch

from biomoe.errors import GenomeInputError

__all__ = ["read_checkpoint", "read_checkpoint_or_none", "recorded"]


def read_checkpoint(path: str | os.PathLike[str]) -> Any:
    """The contents of a torch checkpoint file, loaded on the CPU (tensors memory-mapped when the
    file is in torch's zip format; the legacy pickle format is read in full). A file torch cannot
    read is one :class:`~biomoe.errors.GenomeInputError` line naming it."""
    path = os.fspath(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=False, mmap=zipfile.is_zipfile(path))
    except Exception as exc:
        detail = " ".join(str(exc).split())
        detail = detail if len(detail) <= 200 else detail[:200] + "..."
        raise GenomeInputError(path, f"cannot load checkpoint ({type(exc).__name__}: {detail})") from None


def read_checkpoint_or_none(path: str | os.PathLike[str]) -> Mapping[str, Any] | None:
    """:func:`read_checkpoint` for callers that only look for optional records: None for a folder,
    a missing or unreadable file, or a file that holds no checkpoint dict."""
    if not os.path.isfile(path):
        return None
    try:
        ckpt = read_checkpoint(path)
    except GenomeInputError:
        return None
    return ckpt if isinstance(ckpt, Mapping) else None


def recorded(ckpt: Mapping[str, Any] | None, key: str) -> dict[str, Any]:
    """A dict the checkpoint records under ``key`` (``datamodule_hyper_parameters``,
    ``hyper_parameters``), without private entries; {} when it records none."""
    value = ckpt.get(key) if isinstance(ckpt, Mapping) else None
    return {str(k): v for k, v in value.items() if not str(k).startswith("_")} if isinstance(value, Mapping) else {}
