"""The order in which training windows are drawn: seeded, per-genome, resumable.

Every order here is a pure function of ``(seed, epoch)``, so a run resumed from a checkpoint (a
fresh process with another RNG history) sees the batches the uninterrupted run would have.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence, Sized
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils.data import BatchSampler, RandomSampler, Sampler

from biomoe.data.config import check_settings
from biomoe.errors import ConfigError

if TYPE_CHECKING:
    from biomoe.data.dataset import GenomeWindowDataset
    from biomoe.data.packed import PackedGenomeDataset

__all__ = ["EpochSeededRandomSampler", "GenomeWeightedSampler", "ResumableBatchSampler", "file_shares"]


def file_shares(window_files: np.ndarray, num_files: int, temperature: float = 1.0,
                weights: Sequence[float] | None = None) -> np.ndarray:
    """Probability of drawing a training window from each file.

    File ``f`` with ``n_f`` training windows gets a share proportional to
    ``weights[f] * n_f ** (1 / temperature)``: temperature 1 is sampling by size (every
    window equally likely, as without weights), larger temperatures flatten towards every
    genome equally often (the temperature sampling of multilingual language models), and
    ``weights`` scale files on top (0 leaves a file out of training).
    """
    counts = np.bincount(window_files, minlength=num_files).astype(np.float64)
    check_settings(sampling_temperature=temperature)
    scale = np.ones(num_files) if weights is None else np.asarray(weights, dtype=np.float64)
    shares = np.where(counts > 0, counts ** (1.0 / temperature), 0.0) * scale
    if not shares.sum() > 0:
        raise ConfigError("data.file_weights: every file with training windows has weight 0")
    return shares / shares.sum()


class EpochSeededRandomSampler(RandomSampler):
    """A shuffle whose order is a pure function of ``(seed, epoch)``.

    ``RandomSampler`` draws its seed from the global torch RNG when iterated, so a run
    resumed from a checkpoint (fresh process, different RNG history) would see another
    order. Here :meth:`set_epoch` (called by Lightning, and by the loader from the
    dataset's epoch) selects the permutation. Subclassing ``RandomSampler`` tells
    Lightning the loader shuffles, so under DDP it is replaced by a ``DistributedSampler``
    (itself seeded by ``(seed, epoch)``).
    """

    def __init__(self, data_source: Sized, seed: int = 0) -> None:
        super().__init__(data_source)
        self.seed = int(seed)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        yield from torch.randperm(len(self.data_source), generator=generator).tolist()


class GenomeWeightedSampler(Sampler[int]):
    """Draws ``len(dataset)`` training windows per epoch, first a file by its share, then a
    window of that file uniformly: per-genome sampling that does not depend on how many
    windows each genome has. Packed rows work the same way when each holds the pieces of one
    file (the datamodule packs them so whenever it samples per file).

    The draw is a pure function of ``(seed, epoch)``; the epoch is read from the dataset
    (which the loader sets when a pass starts), so it also advances when Lightning wraps
    this sampler for distributed training (``DistributedSamplerWrapper`` re-iterates it
    every epoch and splits the draw between ranks). Windows are drawn with replacement:
    a small genome given a large share is read several times per epoch.
    """

    def __init__(self, dataset: GenomeWindowDataset | PackedGenomeDataset, shares: np.ndarray, seed: int = 0) -> None:
        self.dataset = dataset
        self.seed = int(seed)
        self.epoch = 0
        self.shares = np.asarray(shares, dtype=np.float64)
        files = dataset.file_index
        self._order = np.argsort(files, kind="stable")  # window indices grouped by file
        counts = np.bincount(files, minlength=len(self.shares))
        self._counts = counts
        self._offsets = np.concatenate(([0], np.cumsum(counts)[:-1]))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.dataset)

    def __iter__(self) -> Iterator[int]:
        epoch = getattr(self.dataset, "epoch", self.epoch)
        rng = np.random.default_rng((self.seed, int(epoch), 2))
        files = rng.choice(len(self.shares), size=len(self.dataset), p=self.shares)
        within = (rng.random(len(files)) * self._counts[files]).astype(np.int64)
        yield from self._order[self._offsets[files] + within].tolist()


class ResumableBatchSampler(BatchSampler):
    """``BatchSampler`` that can start its next pass ``n`` batches in (see :meth:`skip_next`).

    Skipping happens on indices, so no window is read for the batches already trained on.
    It wraps whatever sampler it is given (Lightning re-creates it around a
    ``DistributedSampler`` under DDP), so skipping is per rank, which is what each rank
    consumed. The count of batches to skip comes from the loader's checkpoint state.
    """

    _skip = 0

    def skip_next(self, batches: int) -> None:
        """Drop the first ``batches`` batches of the next pass only."""
        self._skip = int(batches)

    def __iter__(self) -> Iterator[list[int]]:
        skip, self._skip = self._skip, 0
        batches = super().__iter__()
        for _ in range(skip):
            if next(batches, None) is None:
                return
        yield from batches
