"""The run's ``config.yaml``, written like every other biomoe output.

Lightning's ``SaveConfigCallback`` streams the resolved config into ``<log_dir>/config.yaml`` with
``overwrite`` on: with ``trainer.logger: false`` the log dir is ``default_root_dir``, so
``fit --config runs/x/config.yaml --trainer.default_root_dir runs/x`` rewrote the very file it was
reading, half-written if the process died at that moment. Here the file is written atomically
(:func:`biomoe.files.write_text`), and refused when it is one of the command's inputs.

``fit`` writes it when training starts, not at setup: by then the model is built, the data read
and any ``--ckpt_path`` restored, so a run that cannot start (a checkpoint of another model, a
genome that does not fit) leaves the previous run's record as it was.
"""

from __future__ import annotations

import os

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.cli import SaveConfigCallback

from biomoe import files

__all__ = ["AtomicSaveConfigCallback"]


class AtomicSaveConfigCallback(SaveConfigCallback):
    """``SaveConfigCallback`` through biomoe's atomic writer and input guard (single-file configs)."""

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            self._save(trainer, pl_module, stage)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._save(trainer, pl_module, "fit")

    def _save(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self.already_saved:
            return
        if self.save_to_log_dir and not self.multifile:
            log_dir = trainer.log_dir  # broadcasts the directory
            assert log_dir is not None
            config_path = os.path.join(log_dir, self.config_filename)
            files.check_not_input(config_path)
            if not self.overwrite and trainer.is_global_zero and os.path.isfile(config_path):
                raise RuntimeError(f"{config_path} exists; refusing to overwrite the config of a previous run")
            if trainer.is_global_zero:
                files.write_text(config_path, self.parser.dump(self.config, skip_none=False))
            self.save_to_log_dir = False  # written: the parent only runs the save_config hook now
        super().setup(trainer, pl_module, stage)
