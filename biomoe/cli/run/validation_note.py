"""One line at the start of ``fit`` when its validation measures little or nothing.

``data.val_fraction`` holds out the end of every contig. On a genome too short for it (a
100-base FASTA, a few short contigs) the held-out part is a handful of bases or nothing at all:
the run trained, its validation numbers came from less than one window (or never came), and
nothing said so; the end-of-run summary then read like that of any other run. The split is known
only once the data module has opened the genome, so the check runs as a callback after setup, on
rank zero, and prints ``biomoe: note: ...`` naming the genome's size, the window and the fraction.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO

from lightning.pytorch.callbacks import Callback

__all__ = ["ValidationNote", "validation_note"]


def _bases(regions: Iterable[tuple[int, int, int]]) -> int:
    return sum(hi - lo for _, lo, hi in regions)


def validation_note(datamodule: Any) -> str | None:
    """The note for a set-up data module whose validation split holds less than one window of
    ``data.seq_length`` bases, or no validation rows at all; None where validation is sound, or
    where the user turned it off (``data.val_fraction 0`` and no held-out contigs or files)."""
    splits = getattr(datamodule, "splits", None)
    config = getattr(datamodule, "config", None)
    if splits is None or config is None or not getattr(datamodule, "has_val_split", False):
        return None
    held, window = _bases(splits.val), int(config.seq_length)
    rows = datamodule.val_dataset
    has_rows = rows is not None and len(rows) > 0
    if has_rows and held >= window:
        return None
    if held >= window:  # long enough, yet every window was dropped
        why = f"its {held:,} held-out bases yield no window (more N bases than data.max_n_fraction allows)"
    elif config.val_files or config.val_contigs:
        source = "data.val_files" if config.val_files else "data.val_contigs"
        why = f"{source} hold {held:,} bases, less than one validation window of {window:,} bases"
    else:
        genome = _bases(splits.train) + _bases(splits.test) + held
        why = (f"the genome is {genome:,} bases, too short to hold out a validation window of {window:,} bases at "
               f"data.val_fraction {config.val_fraction:g}")
    more = "hold out more with a longer genome, a larger data.val_fraction or data.val_files"
    if has_rows:
        return f"biomoe: note: this run's validation is only {held:,} bases, so its bits/base say little: {why}; {more}"
    return f"biomoe: note: this run has no validation: {why}; {more}"


class ValidationNote(Callback):
    """Prints :func:`validation_note` once, on rank zero, when ``fit`` has set up its data."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit" or not trainer.is_global_zero:
            return
        note = validation_note(trainer.datamodule)
        if note is not None:
            print(note, file=self.stream or sys.stderr)
