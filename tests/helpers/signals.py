"""A callback that sends its own process a signal after a given optimizer step, as a cluster
scheduler's SIGTERM landing mid-run would (deterministically, so a test can compare steps)."""

from __future__ import annotations

import os
import signal
from typing import Any

import lightning as L


class SignalAtStep(L.Callback):
    def __init__(self, step: int, signum: str = "SIGTERM") -> None:
        self.step, self.signum = step, getattr(signal, signum)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)


class SignalDuringValidation(L.Callback):
    """The signal in the middle of the validation that follows optimizer step ``step`` (after its
    first batch), as a Ctrl-C pressed while a long first validation runs."""

    def __init__(self, step: int, signum: str = "SIGINT") -> None:
        self.step, self.signum = step, getattr(signal, signum)

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                                batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if not trainer.sanity_checking and trainer.global_step == self.step and batch_idx == 0:
            os.kill(os.getpid(), self.signum)


class SignalMidStep(L.Callback):
    """The signal inside the step that becomes optimizer step ``step``: after its backward pass,
    before the update, as a Ctrl-C pressed while a long CPU step computes."""

    def __init__(self, step: int, signum: str = "SIGINT", times: int = 1) -> None:
        self.step, self.signum, self.times = step, getattr(signal, signum), times

    def on_after_backward(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.global_step + 1 == self.step:
            for _ in range(self.times):
                os.kill(os.getpid(), self.signum)
