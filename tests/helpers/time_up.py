"""A callback that makes ``trainer.max_time`` run out after a set number of steps, whatever the
machine's speed: tests of what a time-stopped run reports stay deterministic on a loaded CPU."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Timer


class TimeUpAfter(L.Callback):
    def __init__(self, steps: int) -> None:
        self.steps = steps

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if trainer.global_step >= self.steps:
            for callback in trainer.callbacks:
                if isinstance(callback, Timer):
                    callback._duration = 0.0  # the time is up from now on
