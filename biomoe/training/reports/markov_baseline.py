"""Lightning hook that logs an order-k Markov baseline next to the network's held-out bits/base.

Why a callback: the baseline must see exactly the batches (windows, ``loss_mask``,
``limit_val_batches``, distributed shards) the LightningModule is evaluated on, and a callback gets
those batches without the model knowing about baselines. The Markov model is fitted once on the
datamodule's *training* regions the first time it is needed; its score on a split is computed on
the first full (non-sanity-check) pass and cached, because it cannot change between epochs.

While ``fit`` runs, a validation that leaves the network behind the baseline says so in one line
(and the first one that puts it ahead says that once): a run on a CPU can end, by its step count
or ``max_time``, still worse than a k-mer table, and the held-out number alone does not tell a new
user that. A run stopped by a signal says where it stood at its last validation.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
from torch import Tensor

from biomoe.model.losses import LN2, masked_cross_entropy_sum
from biomoe.genomics.markov import MarkovModel, training_sequences

__all__ = ["EvaluationPassCallback", "MarkovBaseline", "MarkovStanding", "markov_standing_line"]

MONITOR = "val/bits_per_base"


@dataclass(frozen=True)
class MarkovStanding:
    """The network against the Markov baseline at one validation of ``fit``."""

    steps: int
    network: float
    markov: float
    order: int

    @property
    def behind(self) -> bool:
        return self.network > self.markov


def markov_standing_line(standing: MarkovStanding) -> str:
    """How one validation's held-out bits/base compares with the Markov baseline, in words."""
    gap = abs(standing.network - standing.markov)
    where = "still behind" if standing.behind else "below"
    return (f"fit: validation after step {standing.steps:,}: {standing.network:.4f} bits/base, {where} the "
            f"order-{standing.order} Markov baseline ({standing.markov:.4f}) by {gap:.4f}")


class EvaluationPassCallback(L.Callback):
    """Routes every validation and test pass to three methods, ``_start``, ``_batch`` (with the
    evaluation step's outputs and the batch) and ``_end``, each given the stage name, ``val`` or
    ``test``, so a metric callback writes its logic once."""

    def _start(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        raise NotImplementedError

    def _batch(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
               batch: dict[str, Tensor], stage: str) -> None:
        raise NotImplementedError

    def _end(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        raise NotImplementedError

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start(trainer, pl_module, "val")

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self._batch(trainer, pl_module, outputs, batch, "val")

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._end(trainer, pl_module, "val")

    def on_test_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start(trainer, pl_module, "test")

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self._batch(trainer, pl_module, outputs, batch, "test")

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._end(trainer, pl_module, "test")


class MarkovBaseline(EvaluationPassCallback):
    """Logs ``{stage}/markov_bits_per_base`` for validate and test (order ``order``, add-``alpha``).

    Computed with :func:`~biomoe.model.losses.masked_cross_entropy_sum` on the Markov log-probabilities
    of each evaluation batch, token-weighted and summed over ranks like the network's
    ``{stage}/bits_per_base``. Does nothing for datamodules without a genome.
    """

    def __init__(self, order: int = 6, alpha: float = 1.0, reverse_complement: bool = True,
                 stream: Any = None) -> None:
        super().__init__()
        self.stream = stream
        self.standing: MarkovStanding | None = None
        """The network against the baseline at the last validation of ``fit`` (None before one)."""
        self._said_ahead = False
        self.order = order
        self.alpha = alpha
        self.reverse_complement = reverse_complement
        self.model: MarkovModel | None = None
        self.cached: dict[str, float] = {}
        self._sums: dict[str, list[Tensor]] = {}

    # ------------------------------------------------------------------------------ helpers
    def _active(self, trainer: L.Trainer) -> bool:
        return not trainer.sanity_checking and getattr(trainer.datamodule, "genome", None) is not None

    def _ensure_model(self, trainer: L.Trainer) -> None:
        if self.model is None:
            self.model = MarkovModel.fit(training_sequences(trainer.datamodule), self.order, self.alpha,
                                         self.reverse_complement)

    def _start(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if not self._active(trainer) or stage in self.cached:
            return
        self._ensure_model(trainer)
        self._sums[stage] = []

    def _batch(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
               batch: dict[str, Tensor], stage: str) -> None:
        if stage not in self._sums:
            return
        labels = batch["labels"]
        logits = self.model.logits(labels, int(pl_module.config.vocab_size))
        ce_sum, n = masked_cross_entropy_sum(logits, labels, batch["loss_mask"])
        self._sums[stage].append(torch.stack([ce_sum.double(), n.double()]))

    def _end(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        sums = self._sums.pop(stage, None)
        if sums is not None:
            local = torch.stack(sums).sum(0) if sums else torch.zeros(2, dtype=torch.float64,
                                                                       device=pl_module.device)
            total = trainer.strategy.reduce(local.to(pl_module.device), reduce_op="sum")
            if float(total[1]) > 0:
                self.cached[stage] = float(total[0] / total[1]) / LN2
        if stage in self.cached and self._active(trainer):
            pl_module.log(f"{stage}/markov_bits_per_base", self.cached[stage], sync_dist=False)

    # ------------------------------------------------------------------- the network against it
    def _say(self, line: str) -> None:
        print(line, file=self.stream or sys.stderr, flush=True)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """During ``fit``: a line at every validation that leaves the network behind the baseline,
        and once when it first gets below it. ``trainer.callback_metrics`` holds the epoch's
        numbers by now, the network's included."""
        if trainer.sanity_checking or trainer.state.fn != "fit" or "val" not in self.cached:
            return
        value = trainer.callback_metrics.get(MONITOR)
        if value is None:
            return
        self.standing = MarkovStanding(trainer.global_step, float(value), self.cached["val"], self.order)
        if not trainer.is_global_zero:
            return
        if self.standing.behind:
            self._say(markov_standing_line(self.standing))
        elif not self._said_ahead:
            self._said_ahead = True
            self._say(markov_standing_line(self.standing))

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        """A run stopped by a signal (Ctrl-C, SIGTERM) says where its last validation left it."""
        if self.standing is None or not self.standing.behind or not trainer.is_global_zero:
            return
        self._say(f"fit: stopped while still behind the order-{self.order} Markov baseline: the last validation "
                  f"(after step {self.standing.steps:,}) scored {self.standing.network:.4f} bits/base against its "
                  f"{self.standing.markov:.4f}")
