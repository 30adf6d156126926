"""The run's ``config.yaml``, written like every other biomoe output.

Lightning's ``SaveConfigCallback`` streams the resolved config into ``<log_dir>/config.yaml`` with
``overwrite`` on: with ``trainer.logger: false`` the log dir is ``default_root_dir``, so
``fit --config runs/x/config.yaml --trainer.default_root_dir runs/x`` rewrote the very file it was
reading, half-written if the process died at that moment. Here the file is written atomically
(:func:`biomoe.files.write_text`), and refused when it is one of the command's inputs.

``fit`` writes it when training starts, not at setup: by then the model is built, the data read
and any ``--ckpt_path`` restored, so a run that cannot start (a checkpoint of another model, a
genome that does not fit) leaves the previous run's record as it was.

A run never changes an earlier run's files. Without a logger the log dir is the run folder itself,
so a second ``fit`` there would replace the first run's ``config.yaml`` (and then its checkpoints):
it stops in one line instead, before its first step. A ``fit`` that resumes a checkpoint inside
that folder is the same run, and its ``config.yaml`` then describes the resumed run;
``validate``/``test``/``predict`` never replace one, and write one only into a logger's folder.
"""

from __future__ import annotations

import os

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.cli import SaveConfigCallback

from biomoe import files, output_checks
from biomoe.errors import GenomeInputError

__all__ = ["AtomicSaveConfigCallback"]


class AtomicSaveConfigCallback(SaveConfigCallback):
    """``SaveConfigCallback`` through biomoe's atomic writer and input guard (single-file configs)."""

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit" and trainer.logger is None:
            return  # validate/test/predict without a logger have no folder of their own to record it in
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
            output_checks.check_not_input(config_path)
            earlier = os.path.isfile(config_path)
            if earlier and stage == "fit" and not _resumes_from(trainer, log_dir):
                raise GenomeInputError(log_dir, "holds an earlier run (its config.yaml), which a new run never "
                                                "changes; give this run another --trainer.default_root_dir, keep a "
                                                "logger (a new version folder per run), or resume that run with "
                                                "--ckpt_path last")
            if trainer.is_global_zero and (stage == "fit" or not earlier):  # a resumed run: its record
                files.write_text(config_path, self.parser.dump(self.config, skip_none=False))
            self.save_to_log_dir = False  # written: the parent only runs the save_config hook now
        super().setup(trainer, pl_module, stage)


def _resumes_from(trainer: Trainer, folder: str) -> bool:
    """Whether this fit resumes a checkpoint inside ``folder`` (it continues that run)."""
    ckpt = trainer.ckpt_path
    if not isinstance(ckpt, str) or not os.path.exists(ckpt):
        return False
    inside = os.path.realpath(ckpt)
    return os.path.commonpath([inside, os.path.realpath(folder)]) == os.path.realpath(folder)
