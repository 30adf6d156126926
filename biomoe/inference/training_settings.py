"""What a checkpoint records about its training data (read without loading the weights twice).

Generation and embedding default to the window length the model was trained on: a causal model
has only learnt positions up to that length, so longer contexts would put it off its training
distribution.
"""

from __future__ import annotations

import os
from typing import Any

import torch

__all__ = ["training_data_settings", "training_seq_length"]


def training_data_settings(ckpt_path: str | os.PathLike[str]) -> dict[str, Any]:
    """The datamodule's hyper-parameters saved in a Lightning checkpoint ({} when absent).

    ``mmap=True`` maps the tensors instead of reading them, so this costs next to nothing even
    for a large checkpoint; files in the legacy (non-zip) format are read in full.
    """
    path = os.fspath(ckpt_path)
    if os.path.isdir(path):
        return {}
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except RuntimeError:  # legacy format: mmap needs the zip layout
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    data = ckpt.get("datamodule_hyper_parameters") if isinstance(ckpt, dict) else None
    return dict(data) if isinstance(data, dict) else {}


def training_seq_length(ckpt_path: str | os.PathLike[str]) -> int | None:
    """Training window length (``data.seq_length``) of a checkpoint, or None if it is not recorded."""
    value = training_data_settings(ckpt_path).get("seq_length")
    return int(value) if isinstance(value, int) and value > 0 else None
