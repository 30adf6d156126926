"""Callbacks the reliability tests plug into real runs through ``--trainer.callbacks+``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning as L
import torch


class StepRecorder(L.Callback):
    """Append one JSON line per optimizer step: loss (as float.hex, so equality is bit-exact),
    the routers' expert bias, a draw from the global torch RNG, and the batch's first tokens."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        routers = [layer.router for layer in pl_module.model.moe_layers()]
        row = {
            "step": trainer.global_step,
            "loss": float(loss).hex(),
            "bias": [float(x).hex() for r in routers for x in r.expert_bias.tolist()],
            "rng": float(torch.rand(())).hex(),
            "batch": batch["labels"][:, :8].tolist(),
        }
        with self.path.open("a") as handle:
            handle.write(json.dumps(row) + "\n")


class PoisonForward(L.Callback):
    """Make the forward pass produce NaN at ``step`` (global step before the update) by
    hooking the token embedding for that one step; the weights themselves stay finite."""

    def __init__(self, step: int, value: float = float("nan")) -> None:
        self.step = step
        self.value = value
        self._handle = None

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if trainer.global_step == self.step:
            value = self.value
            self._handle = pl_module.model.embed.register_forward_hook(
                lambda module, args, out: out * value)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        self._remove()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._remove()

    def _remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


class ValidationRecorder(L.Callback):
    """Append one JSON line per validation that ran to its end during fit: the step it followed
    and how many batches it scored."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self._batches = 0

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._batches = 0

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        self._batches += 1

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        with self.path.open("a") as handle:
            handle.write(json.dumps({"step": trainer.global_step, "batches": self._batches}) + "\n")
