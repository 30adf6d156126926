"""Training length that follows the size of the training split.

A recipe tuned as "3,600 steps" on a 4.4 Mb training split reads a 1.5 Mb genome three times as
often and memorises it: held-out bits/base bottom out and climb again long before the schedule
ends. Measured in *passes* (tokens trained / bases in the training split), the same recipe means
the same thing on every genome. This callback turns ``passes`` into ``max_steps`` when the data is
set up, before the optimizer and its schedule are built, so the cosine schedule decays over
exactly the steps the run makes; ``evaluations`` spreads a fixed number of validations over them,
so early-stopping patience means the same share of the run on every genome.
"""

from __future__ import annotations

import math

import lightning as L
from lightning.pytorch.utilities import rank_zero_info

from biomoe.model.config import ConfigError

__all__ = ["TrainingLength", "steps_for_passes"]


def steps_for_passes(passes: float, train_bases: int, tokens_per_step: int, evaluations: int | None = None,
                     cap: int | None = None) -> tuple[int, int | None]:
    """``(max_steps, validation interval)`` for ``passes`` over ``train_bases``.

    Steps are rounded up to a multiple of the interval (so the last step is validated) and then
    limited to ``cap`` (rounded down to a multiple of the interval when that leaves at least one).
    """
    steps = max(1, math.ceil(passes * train_bases / tokens_per_step))
    if cap is not None and cap > 0:
        steps = min(steps, cap)
    if not evaluations:
        return steps, None
    interval = max(1, math.ceil(steps / evaluations))
    rounded = interval * math.ceil(steps / interval)
    if cap is not None and cap > 0 and rounded > cap:
        rounded = max(interval, cap // interval * interval)
    return rounded, interval


class TrainingLength(L.Callback):
    """Set ``max_steps`` (and the LR schedule's length) to ``passes`` over the training split.

    Args:
        passes: tokens to train on, in multiples of the training split's bases (a pass reads every
            training base once, whatever the stride; windows overlap when the stride is shorter).
        evaluations: validations over the run (sets ``val_check_interval``); None keeps the
            trainer's. Keep ``check_val_every_n_epoch: null`` so validation may fall mid-epoch.

    ``trainer.max_steps``, when set, caps the result: a large genome still ends inside the time the
    config was sized for. ``model.optim.max_steps``, when set, keeps fixing the schedule's length.
    """

    def __init__(self, passes: float, evaluations: int | None = 12) -> None:
        super().__init__()
        if not passes > 0:
            raise ConfigError(f"TrainingLength passes must be > 0, got {passes}")
        if evaluations is not None and evaluations < 1:
            raise ConfigError(f"TrainingLength evaluations must be >= 1 or null, got {evaluations}")
        self.passes = float(passes)
        self.evaluations = evaluations
        self.max_steps: int | None = None
        self.val_check_interval: int | None = None
        self._cap: int | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        data = trainer.datamodule
        bases = getattr(data, "train_bases", None)
        if bases is None:
            raise ConfigError("TrainingLength needs a datamodule that reports train_bases (GenomeDataModule)")
        if self._cap is None:  # the configured max_steps, not one set here by an earlier fit
            self._cap = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else 0
        tokens_per_step = data.batch_size * data.seq_length * trainer.accumulate_grad_batches * trainer.world_size
        steps, interval = steps_for_passes(self.passes, bases, tokens_per_step, self.evaluations, self._cap)
        self.max_steps, self.val_check_interval = steps, interval
        trainer.fit_loop.epoch_loop.max_steps = steps
        if interval is not None:
            trainer.val_check_interval = interval
        capped = f", capped by trainer.max_steps={self._cap:,}" if self._cap and steps < math.ceil(
            self.passes * bases / tokens_per_step) else ""
        every = f", validating every {interval:,} steps" if interval else ""
        rank_zero_info(f"training length: {self.passes:g} passes over {bases:,} training bases at "
                       f"{tokens_per_step:,} tokens/step -> max_steps={steps:,}{capped}{every}")
