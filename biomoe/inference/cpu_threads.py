"""How many threads each operation of a CPU inference run splits over, chosen by measurement.

torch splits every operation over as many threads as the machine has cores. On a CPU that other
work also uses (a laptop, a shared server) the threads of one operation wait for each other at its
end while the system runs something else on one of them, and a run on one thread can be several
times faster than on all of them. On an idle many-core machine the threads pay off instead. Neither the core count nor
the load tells beforehand which case a run is in, so the engines measure it
(:func:`biomoe.inference.batching.run_batches`): a first batch (which pays the warm-up) and a timed
one run on a single thread, a third on torch's thread count, and the rest run on torch's count only
where it scored :data:`MARGIN` times the tokens per second or more (two batches are not always
alike; on a busy machine the first operations split over threads cost seconds, and the gap there
is several-fold). The thread count is put back when the run ends.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["MARGIN", "CpuThreadChoice"]

MARGIN = 1.25
"""How much faster the batch on torch's thread count must be for the rest to run on it."""


class CpuThreadChoice:
    """The thread count of each batch of a CPU run (see the module docstring); inactive on other
    devices and where torch already runs one thread."""

    def __init__(self, device: torch.device) -> None:
        self.default = torch.get_num_threads()
        self.active = device.type == "cpu" and self.default > 1
        self.trials = (1, self.default)
        """Thread counts of the timed batches, after the first (warm-up) one."""
        self.rates: dict[int, float] = {}
        self.chosen: int | None = None
        self._batch = 0

    def threads_for_next(self) -> int:
        if not self.active:
            return self.default
        if self.chosen is not None:
            return self.chosen
        if self._batch == 0:
            return self.trials[0]  # the warm-up batch, untimed
        trial = self._batch - 1
        return self.trials[trial] if trial < len(self.trials) else self.default

    @contextmanager
    def batch(self, tokens: int) -> Iterator[None]:
        """Run one batch of ``tokens`` tokens on its thread count, timing it where it is a trial."""
        threads = self.threads_for_next()
        if self.active:
            torch.set_num_threads(threads)
        started = time.perf_counter()
        yield
        seconds = time.perf_counter() - started
        if self.active and self.chosen is None and 1 <= self._batch <= len(self.trials):
            self.rates[threads] = tokens / max(seconds, 1e-9)
            if len(self.rates) == len(set(self.trials)):
                self.chosen = self.default if self.rates[self.default] >= MARGIN * self.rates[1] else 1
        self._batch += 1

    def restore(self) -> None:
        if self.active:
            torch.set_num_threads(self.default)
