"""A warning for the one training setup with a known gradient fault: compiled MoE blocks on CUDA
that train at a second sequence length in one process (docs/reliability.md, "Known problem:
compiled MoE gradients on CUDA"). A fit from ``GenomeDataModule`` trains at ``data.seq_length``
only, so it never meets this; a custom data module or a changed length in a script can."""

from __future__ import annotations

import torch

from biomoe.model.config import ModelConfig, RuntimeConfig

__all__ = ["SequenceLengthWatch", "watches_sequence_lengths"]


def watches_sequence_lengths(config: ModelConfig, runtime: RuntimeConfig, device: torch.device) -> bool:
    """Compiled blocks with experts on a CUDA device: where the fault was seen (not in dense models,
    not on a CPU)."""
    return runtime.compile and config.num_experts > 1 and device.type == "cuda"


class SequenceLengthWatch:
    """Remembers the first training sequence length and says once when another one comes."""

    def __init__(self, active: bool) -> None:
        self.active = active
        self._first: int | None = None
        self._warned = False

    def see(self, length: int) -> str | None:
        """The warning's text the first time a length differs from the first one, else None."""
        if not self.active or self._warned:
            return None
        if self._first is None:
            self._first = length
            return None
        if length == self._first:
            return None
        self._warned = True
        return (f"training at sequence length {length:,} after {self._first:,} with compiled MoE blocks: on CUDA "
                "their gradients at a second length have been far from eager's (docs/reliability.md, \"Known "
                "problem: compiled MoE gradients on CUDA\"); train at one length, or set "
                "--model.runtime.compile false")
