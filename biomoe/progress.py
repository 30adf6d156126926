"""Progress lines on stderr for the long commands (score-fasta, score-variants, generate, embed).

A 2.8 Mb genome takes minutes to score on a CPU; without a progress line such a run is
indistinguishable from a hung one. ``fit``/``validate``/``predict`` use Lightning's progress bar.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from tqdm.auto import tqdm

__all__ = ["FirstBatchClock", "progress_bar"]


def progress_bar(total: int, desc: str, unit: str = "bp", disable: bool = False):
    """A tqdm bar on stderr (``unit_scale``: 2.8M bp, not 2812345 bp), redrawn at most twice a
    second so that log files collecting stderr stay small. Use as a context manager."""
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, file=sys.stderr, mininterval=0.5,
                dynamic_ncols=True, disable=disable)


Rate = Callable[[float, int, float], str]
"""Formats a rate from (work, progress updates, seconds): ``1.39 Mbp/s``; generate's updates are decode steps."""


class FirstBatchClock:
    """Times a run and, apart from it, its first batch: a progress object (``update(n)``) handed to
    the engine in place of the bar, which it passes on to.

    On a GPU the first batch pays kernel selection, compilation and the allocator's growth (seconds
    where a steady batch takes a fraction of one), so a rate over the whole run understates what
    the next gigabase costs; :meth:`report` gives both. The first batch ends at the ``first_updates``-th
    update; ``sync`` (``torch.cuda.synchronize`` for an engine whose updates do not wait for the
    device) is called there once, the only wait it adds. Engines built on
    :func:`biomoe.inference.batching.run_batches` update only once a batch's results are on the
    host, so they need none. Use as a context manager around the work."""

    def __init__(self, progress=None, sync: Callable[[], object] | None = None, first_updates: int = 1,
                 batch: str = "batch") -> None:
        self.progress, self.sync, self.first_updates, self.batch = progress, sync, max(1, first_updates), batch
        self.updates = 0
        self.work = 0
        self.first_work = 0
        self.first_seconds: float | None = None
        self.seconds = 0.0
        self._started = 0.0

    def __enter__(self) -> FirstBatchClock:
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self._started

    def update(self, n: int = 1) -> None:
        self.updates += 1
        self.work += n
        if self.updates == self.first_updates:
            if self.sync is not None:
                self.sync()
            self.first_seconds = time.perf_counter() - self._started
            self.first_work = self.work
        if self.progress is not None:
            self.progress.update(n)

    def report(self, verb: str, work: int, noun: str, rate: Rate) -> str:
        """``scored 4,100,000 bases in 6.80 s: 1.39 Mbp/s after the first batch (first batch 262,144
        bases in 4.00 s, includes warm-up; 0.60 Mbp/s over the whole run)``; a run of one batch says
        so and gives the whole run's rate. ``work``: what the run did, in ``noun``."""
        seconds = max(self.seconds, 1e-9)
        head = f"{verb} {work:,} {noun} in {self.seconds:.2f} s"
        whole = rate(work, self.updates, seconds)
        first = self.first_seconds
        if first is None or self.updates <= self.first_updates or work <= self.first_work or seconds - first <= 0:
            where = f"in one {self.batch}" if self.updates <= 1 else f"all in the first {self.batch}"
            return f"{head}: {whole} {where} (includes warm-up)"
        steady = rate(work - self.first_work, self.updates - self.first_updates, seconds - first)
        return (f"{head}: {steady} after the first {self.batch} (first {self.batch} {self.first_work:,} {noun} in "
                f"{first:.2f} s, includes warm-up; {whole} over the whole run)")
