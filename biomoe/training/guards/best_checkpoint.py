"""A ModelCheckpoint for the best-model file: everything Lightning writes but the optimizer state.

The best checkpoint is read to score, validate and export; only ``last.ckpt`` is resumed. AdamW's
moments and master weights are most of a checkpoint's size (12 of about 20 bytes per parameter with
an EMA), so keeping them in the best file too doubles what a run leaves on disk for nothing.
Lightning's ``save_weights_only=True`` is no answer: it skips every callback's ``on_save_checkpoint``,
and that hook is where the EMA puts the averaged weights, the ones validation scored, into
``state_dict``. :class:`BestCheckpoint` writes a full checkpoint (callback states, EMA average, loop
and precision state, hyper-parameters) and drops only ``optimizer_states`` and ``lr_schedulers``
from the dict once the other callbacks' hooks ran. ``fit --ckpt_path`` refuses such a file in one
line that points at ``last.ckpt``.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

__all__ = ["DROPPED_KEYS", "BestCheckpoint"]

DROPPED_KEYS = ("optimizer_states", "lr_schedulers")
"""What a best checkpoint leaves out: only a resume reads them."""


class BestCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` (same arguments) whose files hold no optimizer or LR-scheduler state.

    Lightning puts checkpoint callbacks after all others, so by this callback's ``on_save_checkpoint``
    every other callback (the EMA among them) has written its part; the LightningModule's hook,
    which runs later, adds resume state and reads no optimizer state. Only the saves this callback
    makes are trimmed: another ModelCheckpoint's ``last.ckpt`` keeps everything. ``save_last`` is
    refused, since a last checkpoint without optimizer state could not be resumed.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.save_last:
            raise ValueError("BestCheckpoint writes no optimizer state, so it cannot keep last.ckpt (nothing could "
                             "resume it); keep save_last on a ModelCheckpoint of its own")
        self._trimming = False

    @property
    def state_key(self) -> str:
        """The key a ``ModelCheckpoint`` with these arguments has: the run-folder rule and the model
        card find the best file and its score under ``ModelCheckpoint...`` keys, and a run resumed
        from a ``last.ckpt`` written before the switch to this class keeps its best so far."""
        own = super().state_key
        return "ModelCheckpoint" + own[len(type(self).__qualname__):]

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        """Lightning writes every file of this callback here, hooks included: mark those saves."""
        self._trimming = True
        try:
            super()._save_checkpoint(trainer, filepath)
        finally:
            self._trimming = False

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        if self._trimming:
            for key in DROPPED_KEYS:
                checkpoint.pop(key, None)
