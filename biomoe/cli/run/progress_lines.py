"""A progress line every few seconds of ``fit`` when no progress bar runs.

The shipped recipes turn Lightning's bar off (its carriage returns fill log files), and where the
bar is on but stderr is not a terminal (``make fit > log``) it never renders a finished line; either
way a long run would say nothing between its first step and its end. This callback prints one plain
line to stderr at most every ``interval_s`` seconds: step, share of the run, loss, tokens/s and
time left. It reads the loss from the device only when it prints, so steps in between never wait
for the GPU. A resumed run counts on from the step it resumed at, towards the same total, and its
time left comes from the steps taken since this start.

A step or a validation can itself take minutes (a GPU recipe on a CPU: 11 minutes for the first
step), and a line only at step ends then left the run silent that long. While a line is due and no
step has ended, a background thread prints what is running instead (``fit: step 1/6 running, 0:40
so far``, ``fit: validation after step 5, batch 3/40, ...``). It reads only what the hooks noted
down, never the trainer or the device, so it costs the training nothing.
"""

from __future__ import annotations

import math
import sys
import threading
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
        self._rate_since: float | None = None
        """When the tokens/s of the next step line starts counting (the last step line)."""
        self._phase: str | None = None
        """What runs now, as the waiting line names it (None: nothing worth a line)."""
        self._phase_since = 0.0
        self._val_batches: tuple[int, int] = (0, 0)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _out(self) -> Any:
        return self.stream or sys.stderr

    def _print(self, line: str, now: float) -> None:
        with self._lock:
            print(line, file=self._out(), flush=True)
            self._last = now

    # -- while a step or a validation runs -------------------------------------------------------
    def _set_phase(self, phase: str | None, now: float | None = None) -> None:
        with self._lock:
            self._phase, self._phase_since = phase, time.perf_counter() if now is None else now

    def _total(self, trainer: L.Trainer) -> str:
        total = trainer.max_steps
        return f"/{total:,}" if total is not None and total > 0 else ""

    def waiting_line(self, now: float) -> str | None:
        """The line for a step or validation still running ``interval_s`` after the last line, once
        it has itself run half that long: a step that has only just started will end soon, and its
        own line (loss, tokens/s) says more than "running, 0:00 so far" would."""
        with self._lock:
            if self._phase is None or self._last is None or now - self._last < self.interval_s:
                return None
            phase, since = self._phase, self._phase_since
        if now - since < self.interval_s / 2:
            return None
        if phase.startswith("validation"):
            done, total = self._val_batches
            phase += f", batch {done + 1:,}" + (f"/{total:,}" if total else "")
        elapsed = "" if self._started is None else f", {format_duration(now - self._started)} elapsed"
        return f"fit: {phase} running, {format_duration(now - since)} so far{elapsed}"

    def _watch(self) -> None:
        while not self._stop.wait(min(1.0, self.interval_s / 4)):
            now = time.perf_counter()
            line = self.waiting_line(now)
            if line is not None:
                self._print(line, now)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._started = self._last = time.perf_counter()
        self._set_phase("start-up (data, sanity validation)")
        if self._enabled(trainer) and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._watch, name="biomoe-progress", daemon=True)
            self._thread.start()

    def _end(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._end()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._end()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._end()

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self._set_phase(f"step {trainer.global_step + 1:,}{self._total(trainer)}")

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        batches = trainer.num_val_batches
        total = sum(batches) if isinstance(batches, list) else batches
        self._val_batches = (0, int(total) if isinstance(total, (int, float)) and math.isfinite(total) else 0)
        self._set_phase(f"validation after step {trainer.global_step:,}")

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        done, total = self._val_batches
        self._val_batches = (done + 1, total)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._set_phase(None)

    def _enabled(self, trainer: L.Trainer) -> bool:
        if not trainer.is_global_zero:
            return False
        if trainer.progress_bar_callback is None:
            return True
        isatty = getattr(self._out(), "isatty", None)
        return not (callable(isatty) and isatty())  # a bar drawn into a file or pipe shows nothing usable

    # -- at step ends ---------------------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        now = time.perf_counter()
        self._started = self._last = self._rate_since = now
        self._tokens = self._tokens_at_last = 0
        self._first_step = trainer.global_step  # a resumed run starts past 0
        self._set_phase(f"step {trainer.global_step + 1:,}{self._total(trainer)}", now)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        ids = batch.get("input_ids") if isinstance(batch, dict) else None
        if ids is not None:
            self._tokens += int(ids.numel()) * trainer.world_size
        now = time.perf_counter()
        self._set_phase(None, now)  # checkpoints, logging: short, until the next step or validation starts
        if self._last is None or now - self._last < self.interval_s or not self._enabled(trainer):
            return
        line = self.line(trainer, outputs, now)
        self._print(line, now)
        self._tokens_at_last, self._rate_since = self._tokens, now

    def line(self, trainer: L.Trainer, outputs: Any, now: float) -> str:
        step, total = trainer.global_step, trainer.max_steps
        if total is not None and 0 < total < step:
            total = None  # a total already passed is no total (the loop stops at its next check)
        parts = [f"fit: step {step:,}" + (f"/{total:,} ({step / total:.0%})" if total and total > 0 else "")]
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None and hasattr(loss, "detach"):
            value = float(loss.detach())  # the one device read, only when a line is printed
            parts.append(f"loss {value:.4f}" if math.isfinite(value) else "loss non-finite")
        since = now if self._rate_since is None else self._rate_since
        rate = (self._tokens - self._tokens_at_last) / max(now - since, 1e-9)
        parts.append(f"{rate:,.0f} tokens/s")
        elapsed = 0.0 if self._started is None else now - self._started
        done = step - self._first_step
        left = f", ~{format_duration(elapsed / done * (total - step))} left" if total and total > 0 and done > 0 else ""
        parts.append(f"{format_duration(elapsed)} elapsed{left}")
        return ", ".join(parts)
