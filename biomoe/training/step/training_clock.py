"""The host clock of training steps, validation left out.

``fit`` logs tokens/s over the interval between two logging steps; a validation inside that
interval used to count as training time (the rate dipped at every validation) and nothing said
how long a run had trained. :class:`TrainingClock` pauses while validation runs and keeps the
total: ``train/seconds``, a run's training time after its first step (the first step holds
compilation and allocator growth, timed apart by nobody), carried through checkpoints so a resumed
run continues the count. Comparing models "at equal GPU time" reads this column.

The caller reads the clock after waiting for the device, so the device's work is inside each lap.
"""

from __future__ import annotations

from typing import Any

CHECKPOINT_KEY = "biomoe_training_seconds"


class TrainingClock:
    """Laps of training time between logging steps; :meth:`pause` / :meth:`resume` around validation."""

    def __init__(self) -> None:
        self.total = 0.0
        """Training seconds of the run so far, over every lap (and every resumed part)."""
        self._since: float | None = None  # start of the running stretch; None before the first lap or paused
        self._banked = 0.0  # seconds of this lap before a pause
        self.started = False

    def restart(self) -> None:
        """A new fit (or a resumed one) starts: the next :meth:`lap` only starts the clock."""
        self._since, self._banked, self.started = None, 0.0, False

    def lap(self, now: float) -> float | None:
        """Training seconds since the previous lap (None at the first, which starts the clock)."""
        if not self.started:
            self.started, self._since, self._banked = True, now, 0.0
            return None
        seconds = self._banked + (now - self._since if self._since is not None else 0.0)
        self.total += seconds
        self._since, self._banked = now, 0.0
        return seconds

    def pause(self, now: float) -> None:
        if self.started and self._since is not None:
            self._banked += now - self._since
            self._since = None

    def resume(self, now: float) -> None:
        if self.started and self._since is None:
            self._since = now

    def save(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[CHECKPOINT_KEY] = self.total

    def load(self, checkpoint: dict[str, Any]) -> None:
        self.total = float(checkpoint.get(CHECKPOINT_KEY, 0.0))
