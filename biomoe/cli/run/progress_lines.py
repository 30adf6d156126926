"""A progress line every few seconds of ``fit`` when no progress bar runs.

The shipped recipes turn Lightning's bar off (its carriage returns fill log files), and where the
bar is on but stderr is not a terminal (``make fit > log``) it never renders a finished line; either
way a long run would say nothing between its first step and its end. This callback prints one plain
line to stderr at most every ``interval_s`` seconds: step, share of the run, loss, tokens/s and
time left. It reads the loss from the device only when it prints, so steps in between never wait
for the GPU. A resumed run counts on from the step it resumed at, towards the same total, and its
time left comes from the steps taken since this start.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import lightning as L

__all__ = ["ProgressLines", "format_duration"]


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class ProgressLines(L.Callback):
    """One line per ``interval_s`` seconds of training, wherever no progress bar can be seen."""

    def __init__(self, interval_s: float = 10.0, stream: Any = None) -> None:
        self.interval_s = interval_s
        self.stream = stream
        self._started: float | None = None
        self._last: float | None = None
        self._tokens = 0
        self._tokens_at_last = 0
        self._first_step = 0

    def _out(self) -> Any:
        return self.stream or sys.stderr

    def _enabled(self, trainer: L.Trainer) -> bool:
        if not trainer.is_global_zero:
            return False
        if trainer.progress_bar_callback is None:
            return True
        isatty = getattr(self._out(), "isatty", None)
        return not (callable(isatty) and isatty())  # a bar drawn into a file or pipe shows nothing usable

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._started = self._last = time.perf_counter()
        self._tokens = self._tokens_at_last = 0
        self._first_step = trainer.global_step  # a resumed run starts past 0

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        ids = batch.get("input_ids") if isinstance(batch, dict) else None
        if ids is not None:
            self._tokens += int(ids.numel()) * trainer.world_size
        now = time.perf_counter()
        if self._last is None or now - self._last < self.interval_s or not self._enabled(trainer):
            return
        print(self.line(trainer, outputs, now), file=self._out(), flush=True)
        self._tokens_at_last, self._last = self._tokens, now

    def line(self, trainer: L.Trainer, outputs: Any, now: float) -> str:
        step, total = trainer.global_step, trainer.max_steps
        if total is not None and 0 < total < step:
            total = None  # a total already passed is no total (the loop stops at its next check)
        parts = [f"fit: step {step:,}" + (f"/{total:,} ({step / total:.0%})" if total and total > 0 else "")]
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None and hasattr(loss, "detach"):
            value = float(loss.detach())  # the one device read, only when a line is printed
            parts.append(f"loss {value:.4f}" if math.isfinite(value) else "loss non-finite")
        since = now if self._last is None else self._last
        rate = (self._tokens - self._tokens_at_last) / max(now - since, 1e-9)
        parts.append(f"{rate:,.0f} tokens/s")
        elapsed = 0.0 if self._started is None else now - self._started
        done = step - self._first_step
        left = f", ~{format_duration(elapsed / done * (total - step))} left" if total and total > 0 and done > 0 else ""
        parts.append(f"{format_duration(elapsed)} elapsed{left}")
        return ", ".join(parts)
