"""The run's ``config.yaml``, written like every other biomoe output.

Lightning's ``SaveConfigCallback`` streams the resolved config into ``<log_dir>/config.yaml`` with
``overwrite`` on: with ``trainer.logger: false`` the log dir is ``default_root_dir``, so
``fit --config runs/x/config.yaml --trainer.default_root_dir runs/x`` rewrote the very file it was
reading, half-written if the process died at that moment. Here the file is written atomically
(:func:`biomoe.files.write_text`), and refused when it is one of the command's inputs.
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
