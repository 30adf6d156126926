"""The training DataLoader: it starts each epoch of its dataset and resumes mid-epoch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader

from biomoe.data.samplers import ResumableBatchSampler

__all__ = ["EpochAwareDataLoader"]


class EpochAwareDataLoader(DataLoader):
    """DataLoader that tells its dataset a new epoch starts each time it is iterated.

    Lightning iterates the train loader once per epoch (creating the iterator in the
    main process before any worker receives indices), so this is the one place where
    the epoch can be set reliably, also with ``persistent_workers``. No custom
    ``__init__``: Lightning can re-create it with a DistributedSampler.

    It is also resumable mid-epoch: :meth:`state_dict` (saved by Lightning in every
    checkpoint, under ``loops.fit_loop.state_dict.combined_loader``) records the epoch and
    how many batches this pass has yielded; after :meth:`load_state_dict` the next pass
    of the same epoch skips those batches, so a resumed run sees exactly the batches the
    uninterrupted run would have. Lightning does not prefetch from loaders with a length,
    so yielded batches are the batches trained on.
    """

    _yielded = 0
    _resume: dict[str, int] | None = None

    def state_dict(self) -> dict[str, int]:
        epoch = getattr(self.dataset, "epoch", 0)
        return {"epoch": int(epoch), "batches": int(self._yielded)}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._resume = dict(state)

    def __iter__(self) -> Iterator[Any]:
        start_epoch = getattr(self.dataset, "start_epoch", None)
        if callable(start_epoch):
            start_epoch()
        epoch = getattr(self.dataset, "epoch", None)
        sampler = getattr(self.batch_sampler, "sampler", None)
        if epoch is not None and callable(getattr(sampler, "set_epoch", None)):
            sampler.set_epoch(epoch)  # same value Lightning sets; also right outside Lightning
        skip, self._resume = self._resume_skip(epoch), None
        if skip and isinstance(self.batch_sampler, ResumableBatchSampler):
            self.batch_sampler.skip_next(skip)
        else:
            skip = 0
        self._yielded = skip
        return self._counting(super().__iter__())

    def _resume_skip(self, epoch: int | None) -> int:
        state = self._resume
        if state is None or epoch is None or int(state.get("epoch", -1)) != int(epoch):
            return 0  # resumed at an epoch boundary: the new epoch starts from its beginning
        return int(state.get("batches", 0))

    def _counting(self, batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            self._yielded += 1
            yield batch
