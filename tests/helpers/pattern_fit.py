"""A short bf16-true Lightning fit on a learnable repeating token pattern, for optimizer tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch


def fit_on_a_repeating_pattern(module: L.LightningModule, root: Path, steps: int = 40,
                               **trainer_args: Any) -> tuple[L.Trainer, list[float]]:
    """``steps`` steps of ``module`` on one batch of a period-9 pattern; the trainer and each step's loss."""
    pattern = torch.tensor([4, 5, 6, 7, 5, 5, 4, 7, 6])
    ids = torch.stack([pattern[(torch.arange(65) + i) % 9] for i in range(8)])
    batch = {"input_ids": ids[:, :-1], "labels": ids[:, 1:], "loss_mask": torch.ones(8, 64)}
    losses: list[float] = []

    class Record(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, *args):
            losses.append(float(outputs["loss"]))

    trainer = L.Trainer(precision="bf16-true", max_steps=steps, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[Record()],
                        default_root_dir=root, **trainer_args)
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader([batch] * steps, batch_size=None))
    return trainer, losses
