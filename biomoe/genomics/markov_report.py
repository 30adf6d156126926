"""The table of ``biomoe markov``: held-out bits/base of order-k Markov models for k = 0..K.

Uses the same split, windows and loss function as ``biomoe validate`` (a
:class:`~biomoe.data.datamodule.GenomeDataModule` with the given ``seq_length``), so the table is directly
comparable with a network's ``val/bits_per_base`` and tells which ``order`` to give
:class:`~biomoe.training.reports.markov_baseline.MarkovBaseline`.
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader

from biomoe.data.datamodule import GenomeDataModule
from biomoe.genomics.markov import MarkovModel, training_sequences
from biomoe.model.losses import LN2, masked_cross_entropy_sum

__all__ = ["markov_table"]


def markov_table(datamodule: GenomeDataModule, max_order: int, alpha: float = 1.0,
                 reverse_complement: bool = True, batch_size: int = 64) -> list[dict[str, float]]:
    """[{order, bits_per_base, positions}] on the datamodule's validation windows."""
    datamodule.setup("validate")
    if datamodule.val_dataset is None:
        raise ValueError("validation is disabled (val_fraction=0 and no val_contigs)")
    full = MarkovModel.fit(training_sequences(datamodule), max_order, alpha, reverse_complement)
    models = [full.truncated(k) for k in range(max_order + 1)]
    sums = torch.zeros(max_order + 1, dtype=torch.float64)
    count = 0.0
    vocab = datamodule.vocab_size
    for batch in DataLoader(datamodule.val_dataset, batch_size=batch_size, shuffle=False):
        for k, model in enumerate(models):
            ce_sum, n = masked_cross_entropy_sum(model.logits(batch["labels"], vocab), batch["labels"],
                                                 batch["loss_mask"])
            sums[k] += float(ce_sum)
        count += float(n)
    return [{"order": k, "bits_per_base": float(sums[k] / max(count, 1.0)) / LN2, "positions": int(count)}
            for k in range(max_order + 1)]
