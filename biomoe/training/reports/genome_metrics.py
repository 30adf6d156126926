"""Held-out bits/base per genome when the data holds several FASTA files.

Why: pooled over genomes, one number hides that a model does well on the large genome that
dominates the split and badly on a small one, and on held-out strains each strain is its own
question. The evaluation step returns per-window cross-entropy sums (per-token cross-entropy for
packed rows, whose documents may come from several files, see :func:`genome_step_outputs`); this
callback adds them up per file (``batch["genome"]``, set by
:class:`~biomoe.data.datamodule.GenomeDataModule`: one per window, or one per token, -1 on padding) and logs
``{stage}/<genome label>/bits_per_base`` for every genome the split holds, when it holds more
than one. Sums are token-weighted and summed over ranks, like the pooled ``{stage}/bits_per_base``.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from biomoe.model.losses import LN2, masked_cross_entropy_rows
from biomoe.training.reports.markov_baseline import EvaluationPassCallback

__all__ = ["PerGenomeMetrics", "genome_step_outputs"]


def genome_step_outputs(logits: Tensor, batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """What an evaluation step returns for :class:`PerGenomeMetrics`, for a batch with ``genome``.

    One genome per window (``genome`` [batch]): ``row_ce_sum`` and ``row_n``, per window, nats and
    scored bases. One genome per token (``genome`` [batch, seq], packed rows): ``token_ce``, per
    token, nats, 0 where the loss mask excludes the token; the callback adds it up per genome.
    """
    if batch["genome"].dim() == 2:
        token_ce = F.cross_entropy(logits.float().transpose(1, 2), batch["labels"], reduction="none")
        return {"token_ce": torch.where(batch["loss_mask"].bool(), token_ce, torch.zeros_like(token_ce)).detach()}
    row_ce_sum, row_n = masked_cross_entropy_rows(logits, batch["labels"], batch["loss_mask"])
    return {"row_ce_sum": row_ce_sum.detach(), "row_n": row_n}


class PerGenomeMetrics(EvaluationPassCallback):
    """Logs ``val/<genome>/bits_per_base`` and ``test/<genome>/bits_per_base``.

    Needs evaluation steps that return :func:`genome_step_outputs` (per window, or per token for
    packed rows), as :class:`~biomoe.training.step.lightning_module.BioMoEModule` does for batches with a
    ``genome`` entry. Does nothing for data with one file.
    """

    def __init__(self) -> None:
        super().__init__()
        self._sums: dict[str, Tensor] = {}
        self._warned: set[str] = set()
        self.last: dict[str, dict[str, float]] = {}
        """Per stage, the last values logged: label -> bits/base (for summaries)."""

    def _labels(self, trainer: L.Trainer) -> list[str] | None:
        labels = getattr(trainer.datamodule, "genome_labels", None)
        try:
            return list(labels) if labels is not None and len(labels) > 1 else None
        except RuntimeError:  # not set up
            return None

    def _start(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._sums.pop(stage, None)
        labels = None if trainer.sanity_checking else self._labels(trainer)
        if labels is not None:
            self._sums[stage] = torch.zeros(len(labels), 2, dtype=torch.float64, device=pl_module.device)

    def _batch(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
               batch: dict[str, Tensor], stage: str) -> None:
        sums = self._sums.get(stage)
        if sums is None or not isinstance(outputs, dict) or "genome" not in batch:
            return
        genome = batch["genome"].to(sums.device).long()
        if "token_ce" in outputs and genome.dim() == 2:  # packed rows: each token its document's genome
            # weights instead of a boolean selection: no host sync for the number of scored tokens
            scored = (batch["loss_mask"].to(sums.device).bool() & (genome >= 0)).double()
            tokens = torch.stack([outputs["token_ce"].to(sums.device).double() * scored, scored], dim=-1)
            sums.index_add_(0, genome.clamp_min(0).reshape(-1), tokens.reshape(-1, 2))
        elif "row_ce_sum" in outputs:
            rows = torch.stack([outputs["row_ce_sum"].double(), outputs["row_n"].double()], dim=-1)
            sums.index_add_(0, genome, rows.to(sums.device))

    def _end(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        sums = self._sums.pop(stage, None)
        if sums is None:
            return
        total = trainer.strategy.reduce(sums, reduce_op="sum")
        labels = self._labels(trainer) or []
        present = [(label, row) for label, row in zip(labels, total.tolist()) if row[1] > 0]
        missing = [label for label, row in zip(labels, total.tolist()) if row[1] == 0]
        limit = getattr(trainer, f"limit_{'val' if stage == 'val' else 'test'}_batches", 1.0)
        whole = limit is None or (isinstance(limit, float) and limit >= 1.0)  # an int counts batches
        if missing and not whole and stage not in self._warned:
            # A split that holds a genome but whose batches never reached it: say so, rather than
            # leave its row out of the logs without a word.
            self._warned.add(stage)
            more = f" (+{len(missing) - 3} more)" if len(missing) > 3 else ""
            rank_zero_warn(f"{stage}: no {stage} batch reached {', '.join(missing[:3])}{more} "
                           f"(trainer.limit_{'val' if stage == 'val' else 'test'}_batches={limit}); "
                           "per-genome bits/base is logged only for the genomes scored")
        if len(present) < 2:
            return  # one genome scored: the pooled number is its number
        self.last[stage] = {}
        for label, (ce_sum, n) in present:
            value = ce_sum / n / LN2
            self.last[stage][label] = value
            pl_module.log(f"{stage}/{label}/bits_per_base", value, sync_dist=False)
