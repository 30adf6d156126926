"""Lightning hook that logs the network mixed with the repeat expert next to its own bits/base.

Why a callback: like :class:`~biomoe.training.reports.markov_baseline.MarkovBaseline` it must see exactly the evaluation
batches (windows, ``loss_mask``, shards) and, here, the weights being evaluated (the EMA average
when ``EMAWeightAveraging`` has swapped it in). It runs one extra forward per evaluation batch under
the trainer's precision and the model's TE autocast, and mixes it with the repeat expert fitted on
the training split (:mod:`biomoe.genomics.repeat_expert`). Logged as ``{stage}/repeat_mix_bits_per_base`` and
``{stage}/repeat_fraction`` (share of scored bases whose k-mer context occurs in training).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch import Tensor

from biomoe.training.reports.markov_baseline import EvaluationPassCallback
from biomoe.model.losses import LN2
from biomoe.genomics.repeat_expert import RepeatTable, check_settings, fit_on_training_split
from biomoe.genomics.repeat_mix import score_rows

__all__ = ["RepeatMixture"]


class RepeatMixture(EvaluationPassCallback):
    """``k`` None picks :func:`~biomoe.genomics.repeat_expert.default_k` from the training split's size;
    ``switch`` and ``smoothing`` are :func:`~biomoe.genomics.repeat_expert.mixture_log_likelihood`'s.
    ``follow_copies`` also logs ``{stage}/repeat_copy_mix_bits_per_base``: the expert that follows
    copies past mismatches (:meth:`~biomoe.genomics.repeat_expert.RepeatTable.copy_counts`), beside the exact-match
    number, so one run measures both."""

    def __init__(self, k: int | None = None, switch: float = 0.003, smoothing: float = 0.005,
                 follow_copies: bool = False) -> None:
        super().__init__()
        check_settings(k, switch, smoothing)
        self.k, self.switch, self.smoothing, self.follow_copies = k, switch, smoothing, follow_copies
        self.table: RepeatTable | None = None
        self._sums: dict[str, list[Tensor]] = {}

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Fit the table before the first training step (the datamodule is set up by now), so a
        genome too large for it stops the run at once instead of at its first validation."""
        if stage in ("fit", "validate", "test"):
            self._fit_table(trainer)

    def _fit_table(self, trainer: L.Trainer) -> bool:
        if self.table is None and getattr(trainer.datamodule, "genome", None) is not None:
            self.table = fit_on_training_split(trainer.datamodule, self.k)
        return self.table is not None

    def _start(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if trainer.sanity_checking or not self._fit_table(trainer):
            return
        self._sums[stage] = []

    @torch.no_grad()
    def _batch(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
               batch: dict[str, Tensor], stage: str) -> None:
        if stage not in self._sums:
            return
        with trainer.precision_plugin.forward_context():
            logits = pl_module.forward_batch(batch).logits
        scores, mask = score_rows(self.table, torch.log_softmax(logits.float(), -1), batch, self.switch,
                                  self.smoothing, self.follow_copies)
        sums = [-scores.exact[mask].double().sum(), mask.sum().double(), (mask & scores.opinion).sum().double()]
        if scores.copies is not None:
            sums.append(-scores.copies[mask].double().sum())
        self._sums[stage].append(torch.stack(sums))

    def _end(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        sums = self._sums.pop(stage, None)
        if sums is None:
            return
        width = 4 if self.follow_copies else 3
        local = torch.stack(sums).sum(0) if sums else torch.zeros(width, dtype=torch.float64)
        total = trainer.strategy.reduce(local.to(pl_module.device), reduce_op="sum")
        if float(total[1]) > 0:
            pl_module.log(f"{stage}/repeat_mix_bits_per_base", float(total[0] / total[1]) / LN2)
            pl_module.log(f"{stage}/repeat_fraction", float(total[2] / total[1]))
            if self.follow_copies:
                pl_module.log(f"{stage}/repeat_copy_mix_bits_per_base", float(total[3] / total[1]) / LN2)
