"""``trainer.max_time`` as a limit that holds within one step.

Lightning's :class:`~lightning.pytorch.callbacks.Timer` looks at the clock at every step end and
then asks the trainer to stop, but a stop request makes Lightning run one more validation first, and
a validation that runs past the limit is followed by one more step before the next look. On a CPU,
where a validation of a genome can take many minutes, a run with ``max_time: 00:00:09:30`` ended
minutes later. This callback stops at the first step end past the limit without that extra
validation, and after a validation that ran past it without another step. What a validation due at
that point would have scored is not lost for resuming: ``last.ckpt`` (written when training ends)
holds every step.
"""

from __future__ import annotations

import sys
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Timer

__all__ = ["StopAtTimeLimit"]


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class StopAtTimeLimit(L.Callback):
    """Stop ``fit`` at the first step end (or validation end) past the Timer's duration, with no
    validation after it. Does nothing without a Timer that has a duration (``trainer.max_time``)."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream
        self.stopped_at_step: int | None = None
        self._limit_val_batches: Any = None

    @staticmethod
    def _timer(trainer: L.Trainer) -> Timer | None:
        return next((cb for cb in trainer.callbacks if isinstance(cb, Timer) and cb.time_remaining() is not None),
                    None)

    def _time_up(self, trainer: L.Trainer) -> bool:
        timer = self._timer(trainer)
        if timer is None:
            return False
        remaining = timer.time_remaining()
        return bool(trainer.strategy.broadcast(remaining is not None and remaining <= 0))  # rank zero's clock

    def _stop(self, trainer: L.Trainer, where: str) -> None:
        trainer.should_stop = True
        if self.stopped_at_step is not None:
            return
        self.stopped_at_step = trainer.global_step
        # Lightning validates once more before it honours a stop; with no validation batches it cannot
        self._limit_val_batches = trainer.limit_val_batches
        trainer.limit_val_batches = 0
        timer = self._timer(trainer)
        if trainer.is_global_zero and timer is not None:
            elapsed = timer.time_elapsed()
            limit = elapsed + (timer.time_remaining() or 0.0)
            print(f"biomoe: note: trainer.max_time ({_clock(limit)}) reached {where} {trainer.global_step:,} "
                  f"({_clock(elapsed)} of training): stopping here, with no further validation",
                  file=self.stream or sys.stderr, flush=True)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self._time_up(trainer):
            self._stop(trainer, "after step")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit" and not trainer.sanity_checking and self._time_up(trainer):
            self._stop(trainer, "during the validation after step")

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._limit_val_batches is not None:
            trainer.limit_val_batches, self._limit_val_batches = self._limit_val_batches, None
