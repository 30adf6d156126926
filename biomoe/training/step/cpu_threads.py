"""How many threads each operation of a run on a CPU splits over.

torch splits every operation over as many threads as the machine has cores. For the small networks
a CPU can train, the operations are short, and each ends with all its threads meeting: on a
machine whose cores also serve other work (a laptop, a shared server) a thread that the system has
paused holds the others up at every such meeting, and a step takes many times longer than on one
thread. The CPU recipe therefore trains on one thread; ``threads: null`` keeps torch's choice.
The count is set when the run starts on a CPU and put back when it ends; a GPU run is left alone.
"""

from __future__ import annotations

import sys
from typing import Any

import lightning as L
import torch

__all__ = ["CpuThreads"]


class CpuThreads(L.Callback):
    """``torch.set_num_threads(threads)`` for a run on a CPU, restored at its end."""

    def __init__(self, threads: int | None = 1, stream: Any = None) -> None:
        if threads is not None and threads < 1:
            raise ValueError(f"CpuThreads threads must be >= 1 or null, got {threads}")
        self.threads = threads
        self.stream = stream
        self._before: int | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.threads is None or trainer.strategy.root_device.type != "cpu" or self._before is not None:
            return
        self._before = torch.get_num_threads()
        if self._before != self.threads:
            torch.set_num_threads(self.threads)
            if trainer.is_global_zero:
                stage = getattr(stage, "value", stage)  # Lightning passes TrainerFn.FITTING, a str enum
                print(f"biomoe: note: {stage} runs on {self.threads} CPU thread{'' if self.threads == 1 else 's'} "
                      f"per operation (of {self._before}): small operations split over more wait for each other "
                      "on a CPU that other work shares", file=self.stream or sys.stderr, flush=True)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._before is not None:
            torch.set_num_threads(self._before)
            self._before = None
