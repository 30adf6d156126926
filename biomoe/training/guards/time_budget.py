"""Fit a run into a wall-clock budget with a *step*-based, fully decayed learning-rate schedule.

Comparisons "at equal wall-clock time" need a run that ends when the time is up, but a
``max_time`` stop alone cuts a cosine schedule sized for some guessed ``max_steps`` anywhere in the
middle, so the result depends on the guess. This callback measures the step rate early in the
run, turns the remaining time into a step count, and from then on the run is an ordinary
``max_steps`` run: ``trainer.max_steps`` and the LR schedule's length are set to that count (rounded
down to a multiple of ``round_to``, e.g. the validation interval, so the last step is validated).
The chosen count is printed and logged, so another run (a dense baseline on the same tokens) can
reuse it as a plain ``max_steps``.
"""

from __future__ import annotations

import time

import lightning as L

from biomoe.training.optimization.lr_schedule import warmup_cosine

__all__ = ["TimeBudget"]


class TimeBudget(L.Callback):
    """Set ``max_steps`` so that training (validation included) takes about ``seconds``.

    Measures steps/s over steps ``[measure_from, measure_from + measure_steps)``; the rest of the
    budget, less ``reserve`` (a fraction for validation, checkpoints and rate drift), is converted to
    steps. Keep ``trainer.max_time`` a little above ``seconds`` as a hard guard.
    """

    def __init__(self, seconds: float, measure_from: int = 20, measure_steps: int = 40,
                 reserve: float = 0.06, round_to: int = 100) -> None:
        super().__init__()
        if seconds <= 0 or measure_steps <= 0 or not 0 <= reserve < 1:
            raise ValueError("TimeBudget needs seconds > 0, measure_steps > 0 and 0 <= reserve < 1")
        self.seconds = float(seconds)
        self.measure_from = int(measure_from)
        self.measure_steps = int(measure_steps)
        self.reserve = float(reserve)
        self.round_to = max(int(round_to), 1)
        self.total_steps: int | None = None
        self._fit_start: float | None = None
        self._measure_start: float | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._fit_start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.total_steps is not None:
            return
        step = trainer.global_step
        if step == self.measure_from:
            self._measure_start = time.perf_counter()
        elif self._measure_start is not None and step >= self.measure_from + self.measure_steps:
            now = time.perf_counter()
            rate = (step - self.measure_from) / max(now - self._measure_start, 1e-9)
            remaining = self.seconds * (1 - self.reserve) - (now - self._fit_start)
            total = step + int(rate * max(remaining, 0.0))
            total = max(step + 1, total // self.round_to * self.round_to)
            self.apply(trainer, pl_module, total)
            print(f"time budget: {rate:.2f} steps/s -> max_steps={total} "
                  f"(budget {self.seconds:.0f} s, {now - self._fit_start:.0f} s used)", flush=True)

    def apply(self, trainer: L.Trainer, pl_module: L.LightningModule, total: int) -> None:
        """Make ``total`` the run's length: trainer stop and LR schedule end."""
        self.total_steps = int(total)
        trainer.fit_loop.epoch_loop.max_steps = self.total_steps
        optim = pl_module.optim
        optim.max_steps = self.total_steps
        for config in trainer.lr_scheduler_configs:
            scheduler = config.scheduler
            if hasattr(scheduler, "lr_lambdas"):
                scheduler.lr_lambdas = [warmup_cosine(optim.warmup_steps, self.total_steps, optim.min_lr_ratio)
                                        for _ in scheduler.lr_lambdas]
        pl_module.log("time_budget/max_steps", float(self.total_steps), rank_zero_only=True)
