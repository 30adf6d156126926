"""Lightning hook that logs an order-k Markov baseline next to the network's held-out bits/base.

Why a callback: the baseline must see exactly the batches (windows, ``loss_mask``,
``limit_val_batches``, distributed shards) the LightningModule is evaluated on, and a callback gets
those batches without the model knowing about baselines. The Markov model is fitted once on the
datamodule's *training* regions the first time it is needed; its score on a split is computed on
the first full (non-sanity-check) pass and cached, because it cannot change between epochs.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch import Tensor

from biomoe.model.losses import LN2, masked_cross_entropy_sum
from biomoe.genomics.markov import MarkovModel, training_sequences

__all__ = ["EvaluationPassCallback", "MarkovBaseline"]


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

    def __init__(self, order: int = 6, alpha: float = 1.0, reverse_complement: bool = True) -> None:
        super().__init__()
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
