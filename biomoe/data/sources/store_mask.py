"""Soft-mask runs of a store's shard, kept beside it in a compressed file.

Why: ``.2bit`` stores every soft-masked (lowercase) run as two 32-bit words, 8 bytes a run. A
repeat-masked plant or animal chromosome has a run every ~100 bases, so the runs of the corpus
cost 0.025 bytes per base, a tenth of the whole store. Stored as gaps and lengths (small numbers)
and deflated, a run takes about 2.5 bytes. The shard's ``.2bit`` then holds no mask blocks (it
still reads as the same bases, upper case, in any ``.2bit`` tool) and :class:`MaskRuns` puts the
case back when a window is read.

File: a NumPy ``.npz`` (``np.savez_compressed``) with ``counts`` (runs per record of the shard, in
record order), ``gaps`` (bases from the end of the previous run, or the record's start, to the run)
and ``sizes`` (bases in the run), all unsigned 32-bit.
"""

from __future__ import annotations

import dataclasses
import io
import os
from pathlib import Path

import numpy as np

from biomoe.data.sources.store_twobit import EncodedRecord
from biomoe.errors import GenomeInputError

__all__ = ["MaskRuns", "encode_mask_runs", "without_mask"]


def encode_mask_runs(records: list[EncodedRecord]) -> bytes:
    """The compressed mask file of a shard holding ``records``."""
    counts = np.array([len(r.mask_starts) for r in records], dtype="<u4")
    gaps, sizes = [], []
    for record in records:
        starts = record.mask_starts.astype(np.int64)
        ends = starts + record.mask_sizes.astype(np.int64)
        gaps.append(starts - np.concatenate(([0], ends[:-1])))
        sizes.append(record.mask_sizes)
    buffer = io.BytesIO()
    empty = np.zeros(0, dtype="<u4")
    np.savez_compressed(buffer, counts=counts,
                        gaps=np.concatenate(gaps).astype("<u4") if gaps else empty,
                        sizes=np.concatenate(sizes).astype("<u4") if sizes else empty)
    return buffer.getvalue()


def without_mask(record: EncodedRecord) -> EncodedRecord:
    """``record`` with no mask blocks (its runs go to the mask file instead)."""
    empty = np.zeros(0, dtype="<u4")
    return dataclasses.replace(record, mask_starts=empty, mask_sizes=empty)


class MaskRuns:
    """The soft-mask runs of one shard, read from its mask file on first use in each process."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._runs: list[tuple[np.ndarray, np.ndarray]] | None = None
        self._pid = -1

    def __getstate__(self) -> dict[str, object]:
        return {"path": self.path, "_runs": None, "_pid": -1}

    def _load(self) -> list[tuple[np.ndarray, np.ndarray]]:
        try:
            with np.load(self.path) as data:
                counts, gaps, sizes = (data[key].astype(np.int64) for key in ("counts", "gaps", "sizes"))
        except (OSError, ValueError, KeyError) as exc:
            raise GenomeInputError(self.path, f"store mask file cannot be read ({exc}); prepare the store again") \
                from None
        if counts.sum() != len(gaps) or len(gaps) != len(sizes):
            raise GenomeInputError(self.path, "store mask file is inconsistent; prepare the store again")
        bounds = np.concatenate(([0], np.cumsum(counts)))
        runs = []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            steps = np.empty(2 * (hi - lo), dtype=np.int64)
            steps[0::2], steps[1::2] = gaps[lo:hi], sizes[lo:hi]
            edges = np.cumsum(steps)
            runs.append((edges[0::2], edges[1::2]))
        return runs

    def close(self) -> None:
        self._runs = None

    def record(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of the soft-masked runs of record ``index`` of the shard."""
        if self._runs is None or self._pid != os.getpid():
            self._runs, self._pid = self._load(), os.getpid()
        if index >= len(self._runs):
            raise GenomeInputError(self.path, f"store mask file has no record {index}; prepare the store again")
        return self._runs[index]
