"""Reading a checkpoint file: the one place biomoe calls ``torch.load`` on a user's checkpoint.

Every reader of a checkpoint (commands, callbacks, the model card, the run-folder resolver) goes
through :func:`read_checkpoint`, so how a file is opened (on the CPU, memory-mapped when torch's
zip format allows it, so that reading the hyper-parameters of a large file costs next to nothing)
and how a failure is reported is decided here once.

Files are read with torch's weights-only unpickler (tensors, plain containers and the types of
:mod:`~biomoe.checkpoint.safe_types`): a pickled object that would run code when loaded is
refused with one line naming it, unless the user trusts the file
(:func:`~biomoe.checkpoint.safe_types.trusted`).
"""

from __future__ import annotations

import os
import pickle
import re
import zipfile
from collections.abc import Mapping
from typing import Any

import torch

from biomoe.checkpoint.safe_types import TRUST_OPTION, allow_checkpoint_types, trusted
from biomoe.errors import GenomeInputError

__all__ = ["read_checkpoint", "read_checkpoint_or_none", "recorded", "refusal"]

allow_checkpoint_types()  # also for Lightning's own weights-only loads of --ckpt_path

_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


def refusal(exc: BaseException) -> str | None:
    """What to tell the user when the weights-only unpickler refused a file (None: ``exc`` is
    some other failure): the type of the object, which loading would run."""
    found = _GLOBAL.search(str(exc)) if isinstance(exc, pickle.UnpicklingError) else None
    if found is None or "weights only" not in str(exc).lower():
        return None  # a broken file, not a refused object: torch's own words say more
    return (f"holds a pickled '{found.group(1)}' object, which loading would run; load it only if you trust "
            f"its source: {TRUST_OPTION}")


def read_checkpoint(path: str | os.PathLike[str]) -> Any:
    """The contents of a torch checkpoint file, loaded on the CPU (tensors memory-mapped when the
    file is in torch's zip format; the legacy pickle format is read in full). A file torch cannot
    read is one :class:`~biomoe.errors.GenomeInputError` line naming it, as is one that holds
    anything but tensors, plain data and biomoe's config types, unless checkpoints are trusted."""
    path = os.fspath(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=not trusted(), mmap=zipfile.is_zipfile(path))
    except Exception as exc:
        refused = refusal(exc)
        if refused is not None:
            raise GenomeInputError(path, refused) from None
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
