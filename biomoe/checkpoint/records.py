"""What a checkpoint records about its training data (read without loading the weights).

Generation and embedding default to the window length the model was trained on: a causal model
has only learnt positions up to that length, so longer contexts would put it off its training
distribution. ``validate``/``test``/``predict`` score the FASTA files and held-out splits the
checkpoint records, and the repeat expert is fitted on its training regions.
"""

from __future__ import annotations

import os
from typing import Any

from biomoe.checkpoint.read import read_checkpoint_or_none, recorded

__all__ = ["training_data_settings", "training_seq_length"]


def training_data_settings(ckpt_path: str | os.PathLike[str]) -> dict[str, Any]:
    """The datamodule's hyper-parameters saved in a Lightning checkpoint file ({} when absent, and
    for a folder: distributed checkpoints keep them in their own metadata)."""
    return recorded(read_checkpoint_or_none(ckpt_path), "datamodule_hyper_parameters")


def training_seq_length(ckpt_path: str | os.PathLike[str]) -> int | None:
    """Training window length (``data.seq_length``) of a checkpoint, or None if it is not recorded."""
    value = training_data_settings(ckpt_path).get("seq_length")
    return int(value) if isinstance(value, int) and value > 0 else None
