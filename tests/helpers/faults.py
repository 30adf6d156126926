"""A callback that fails a run after setup and before its first step, where restoring a checkpoint,
the strategy's setup or the sanity validation can fail in a real run."""

from __future__ import annotations

import lightning as L

from biomoe.errors import GenomeInputError


class FailOnFitStart(L.Callback):
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        raise GenomeInputError(None, "stopped on purpose before the first step")
