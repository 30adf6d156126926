"""A resumable checkpoint when a scheduler stops ``fit`` with SIGTERM.

Cluster schedulers (SLURM, Kubernetes, batch queues) send SIGTERM some seconds before they kill a
job. Lightning already turns that signal into a :class:`~lightning.pytorch.utilities.exceptions.SIGTERMException`
at the next step boundary (the optimizer step done, on every rank at once), but saves nothing and
ends with exit status 0, so the job looks finished and there is nothing to resume. This callback
saves ``last.ckpt`` where the run's :class:`~lightning.pytorch.callbacks.ModelCheckpoint` keeps its
files, says in one line how to resume, and :func:`biomoe.cli.main.main` exits with 143 (128 +
SIGTERM), the status a shell gives a process stopped by that signal.

SLURM's own requeue signal (``#SBATCH --signal=SIGUSR1@90``) is Lightning's
:class:`~lightning.pytorch.plugins.environments.SLURMEnvironment` with ``auto_requeue``: it saves
``hpc_ckpt_N.ckpt``, requeues the job, and the requeued job resumes from it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

__all__ = ["SaveOnSigterm", "SIGTERM_EXIT_CODE", "is_sigterm_exit"]

SIGTERM_EXIT_CODE = 143  # 128 + signal.SIGTERM


def is_sigterm_exit(exc: BaseException) -> bool:
    """Whether ``exc`` is Lightning's end of a run stopped by SIGTERM."""
    return isinstance(exc, SIGTERMException)


class SaveOnSigterm(L.Callback):
    """Save ``last.ckpt`` when Lightning stops ``fit`` on SIGTERM; a no-op otherwise."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream
        self.saved_path: str | None = None

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, SIGTERMException) or trainer.state.fn != "fit":
            return
        path = os.path.join(checkpoint_folder(trainer), ModelCheckpoint.CHECKPOINT_NAME_LAST
                            + ModelCheckpoint.FILE_EXTENSION)
        # all of the state (optimizer, loops, callbacks): every rank takes part, sharded state is gathered
        trainer.save_checkpoint(path, weights_only=False)
        self.saved_path = path
        if trainer.is_global_zero:
            print(f"biomoe: stopped by SIGTERM after step {trainer.global_step}; resumable checkpoint "
                  f"{path}; resume with the same command and --ckpt_path last",
                  file=self.stream or sys.stderr, flush=True)


def checkpoint_folder(trainer: L.Trainer) -> str:
    """Where ``--ckpt_path last`` will look: the folder of the first ModelCheckpoint that keeps a
    last checkpoint, else of the first ModelCheckpoint, else ``<log_dir>/checkpoints``."""
    callbacks = [cb for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint)]
    chosen = next((cb for cb in callbacks if cb.save_last), callbacks[0] if callbacks else None)
    if chosen is not None and chosen.dirpath:
        return os.fspath(chosen.dirpath)
    return os.path.join(trainer.log_dir or trainer.default_root_dir, "checkpoints")
