"""A callback that makes steps and validation batches take a set wall time (a CPU running a GPU
recipe, in seconds instead of minutes) and writes when training started and ended and how many
validation batches ran (JSON, for tests of time limits): seconds since training started."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import lightning as L


class SlowSteps(L.Callback):
    def __init__(self, path: str, train_s: float = 0.0, val_s: float = 0.0) -> None:
        self.path, self.train_s, self.val_s = Path(path), train_s, val_s
        self.record: dict[str, Any] = {"val_batches": 0, "steps": 0, "step_ends": []}
        self._start = 0.0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = time.monotonic()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        time.sleep(self.train_s)
        self.record["steps"] = trainer.global_step
        self.record["step_ends"].append(time.monotonic() - self._start)

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        time.sleep(self.val_s)
        if not trainer.sanity_checking:
            self.record["val_batches"] += 1

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.record["train_s"] = time.monotonic() - self._start
        self.path.write_text(json.dumps(self.record))
