"""A resumable checkpoint when a scheduler stops ``fit`` with SIGTERM, and one honest line on Ctrl-C.

Cluster schedulers (SLURM, Kubernetes, batch queues) send SIGTERM some seconds before they kill a
job. Lightning already turns that signal into a :class:`~lightning.pytorch.utilities.exceptions.SIGTERMException`
at the next step boundary (the optimizer step done, on every rank at once), but saves nothing and
ends with exit status 0, so the job looks finished and there is nothing to resume. This callback
saves ``last.ckpt`` where the run's :class:`~lightning.pytorch.callbacks.ModelCheckpoint` keeps its
files, says in one line how to resume, and :func:`biomoe.cli.main.main` exits with 143 (128 +
SIGTERM), the status a shell gives a process stopped by that signal.

Ctrl-C keeps what was trained: when it lands between optimizer steps (in a validation, a checkpoint
write, logging) after a step newer than the newest checkpoint, ``last.ckpt`` is written as for
SIGTERM, so a Ctrl-C during the first validation no longer throws away the steps before it. The
first Ctrl-C inside a step (forward, backward, the update, where the weights may be half updated)
lets that step finish, then stops and saves the same way; a second one stops at once. A
validation cut short is saved as not yet run, so the resumed run runs it again from its first
batch (its partial sums are not in the file). The closing line says what of the run is on disk
(the newest checkpoint this run wrote or resumed from, its step, and the exact command that
resumes it) or that nothing was saved, so no one resumes a checkpoint of another run. Under
several processes nothing new is saved on Ctrl-C: the write is collective and the other processes
may not have stopped at the same place.

SLURM's own requeue signal (``#SBATCH --signal=SIGUSR1@90``) is Lightning's
:class:`~lightning.pytorch.plugins.environments.SLURMEnvironment` with ``auto_requeue``: it saves
``hpc_ckpt_N.ckpt``, requeues the job, and the requeued job resumes from it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from biomoe.checkpoint.read import read_checkpoint_or_none
from biomoe.training.guards.stop_report import resume_command, set_line
from biomoe.training.optimization.ema import EMAWeightAveraging

__all__ = ["SaveOnSigterm", "SIGTERM_EXIT_CODE", "is_sigterm_exit"]

SIGTERM_EXIT_CODE = 143  # 128 + signal.SIGTERM


def is_sigterm_exit(exc: BaseException) -> bool:
    """Whether ``exc`` is Lightning's end of a run stopped by SIGTERM."""
    return isinstance(exc, SIGTERMException)


class SaveOnSigterm(L.Callback):
    """Save ``last.ckpt`` when Lightning stops ``fit`` on SIGTERM, and on a Ctrl-C between steps
    that left steps unsaved; either way, say what was saved and how to resume.

    ``command`` is the command line (after the program name) that started the run: the resume
    command printed is that line with ``--ckpt_path`` set to the checkpoint."""

    def __init__(self, stream: Any = None, command: Sequence[str] | None = None) -> None:
        self.stream = stream
        self.command = list(command) if command is not None else list(sys.argv[1:])
        self.saved_path: str | None = None
        self._resumed: tuple[str, int] | None = None
        self._between_steps = False
        """True from the end of a batch that stepped the optimizer to the start of the next batch:
        where weights, optimizer and loops agree, as in a checkpoint ModelCheckpoint writes."""
        self._stepped = False
        self._in_step = False
        self._stop_requested = False
        self._previous_handler: Any = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        ckpt = trainer.ckpt_path
        if isinstance(ckpt, str) and os.path.exists(ckpt):
            self._resumed = (ckpt, trainer.global_step)
        if trainer.world_size == 1 and threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        """The first Ctrl-C inside a step lets the step finish (see the module docstring); any other
        is Python's KeyboardInterrupt, at once."""
        if self._in_step and not self._stop_requested:
            self._stop_requested = True
            print("biomoe: Ctrl-C: finishing this step to save it (Ctrl-C again stops at once)",
                  file=self.stream or sys.stderr, flush=True)
            return
        raise KeyboardInterrupt

    def _restore_sigint(self) -> None:
        if self._previous_handler is not None:
            signal.signal(signal.SIGINT, self._previous_handler)
            self._previous_handler = None

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restore_sigint()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._restore_sigint()

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self._between_steps = self._stepped = False
        self._in_step = True

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any) -> None:
        self._stepped = True

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self._between_steps = self._stepped  # a batch that only accumulated gradients is not a whole step
        if self._stepped:
            self._in_step = False
            if self._stop_requested:  # the Ctrl-C that came during this step: stop here, where it saves
                raise KeyboardInterrupt

    def _save_last(self, trainer: L.Trainer) -> str:
        path = os.path.join(checkpoint_folder(trainer), ModelCheckpoint.CHECKPOINT_NAME_LAST
                            + ModelCheckpoint.FILE_EXTENSION)
        # all of the state (optimizer, loops, callbacks): every rank takes part, sharded state is gathered
        trainer.save_checkpoint(path, weights_only=False)
        self.saved_path = path
        return path

    def _save_on_interrupt(self, trainer: L.Trainer) -> None:
        """``last.ckpt`` after a Ctrl-C that left whole steps unsaved (see the module docstring). A
        validation it cut short is recorded as started with none of its batches done (its partial
        sums are not in the file), so the resumed run runs all of it again before training on, as
        Lightning resumes a checkpoint written mid-validation; the weights of a validation that
        scored the EMA's average are put back to the training weights first."""
        saved = self.newest_saved(trainer)
        if not self._between_steps or trainer.world_size > 1 or trainer.global_step <= (saved[1] if saved else 0):
            return
        for callback in trainer.callbacks:
            if isinstance(callback, EMAWeightAveraging):
                callback.restore_training_weights(trainer.lightning_module)
        progress = trainer.fit_loop.epoch_loop.val_loop.batch_progress
        if trainer.validating or progress.current.ready > progress.current.completed:
            before = progress.total.completed - progress.current.completed  # batches of earlier validations
            progress.total.ready = progress.total.started = before + 1
            progress.total.processed = progress.total.completed = before
            progress.current.ready = progress.current.started = 1
            progress.current.processed = progress.current.completed = 0
        try:
            self._save_last(trainer)
        except Exception as exc:  # the line then says what is on disk; the failure in a few words
            print(f"biomoe: warning: could not save last.ckpt on Ctrl-C ({type(exc).__name__}: {exc})",
                  file=self.stream or sys.stderr, flush=True)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._restore_sigint()
        if trainer.state.fn != "fit":
            return
        if isinstance(exception, KeyboardInterrupt):
            self._save_on_interrupt(trainer)
            if trainer.is_global_zero:
                set_line(self.interrupted_line(trainer))
            return
        if not isinstance(exception, SIGTERMException):
            return
        path = self._save_last(trainer)
        if trainer.is_global_zero:
            print(f"biomoe: stopped by SIGTERM after step {trainer.global_step}; resumable checkpoint "
                  f"{path}; resume with: {resume_command(self.command, path)}",
                  file=self.stream or sys.stderr, flush=True)

    def newest_saved(self, trainer: L.Trainer) -> tuple[str, int] | None:
        """The newest complete checkpoint of this run and its step (a write cut off by Ctrl-C left
        no file, so the file found is the one before it), else the checkpoint it resumed from."""
        written: list[str] = []
        for callback in trainer.checkpoint_callbacks:
            if isinstance(callback, ModelCheckpoint):
                written += [callback.last_model_path, callback.best_model_path, *callback.best_k_models]
        written.append(self.saved_path or "")
        files = [p for p in dict.fromkeys(written) if p and os.path.isfile(p)]
        if files:
            newest = max(files, key=os.path.getmtime)
            # the step the file holds, read from it: a write that started just after it and was cut off
            # must not lend it its step (the file is memory-mapped, only its small records are read)
            step = read_checkpoint_or_none(newest)
            if step is not None and isinstance(step.get("global_step"), int):
                return newest, step["global_step"]
        return self._resumed

    def interrupted_line(self, trainer: L.Trainer) -> str:
        head = f"interrupted (Ctrl-C) at step {trainer.global_step}"
        saved = self.newest_saved(trainer)
        if saved is None:
            return (f"{head}; nothing of this run was saved (no checkpoint written yet); the same command "
                    "starts it again from step 0")
        path, step = saved
        return (f"{head}; saved: {path} (step {step}); resume with: {resume_command(self.command, path)} "
                "(the resumed run writes a new version folder and leaves this one as it is)")


def checkpoint_folder(trainer: L.Trainer) -> str:
    """Where ``--ckpt_path last`` will look: the folder of the first ModelCheckpoint that keeps a
    last checkpoint, else of the first ModelCheckpoint, else ``<log_dir>/checkpoints``."""
    callbacks = [cb for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint)]
    chosen = next((cb for cb in callbacks if cb.save_last), callbacks[0] if callbacks else None)
    if chosen is not None and chosen.dirpath:
        return os.fspath(chosen.dirpath)
    return os.path.join(trainer.log_dir or trainer.default_root_dir, "checkpoints")
