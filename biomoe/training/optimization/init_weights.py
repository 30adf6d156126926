"""Start a fit from another run's weights: fine-tuning a pretrained model on a new genome.

``fit --ckpt_path`` *resumes* a run: optimizer state, step count, schedule and data position come
back too, so a pretrained checkpoint would continue its own schedule instead of starting a short
fine-tune. This callback loads only the network's weights (the EMA average where the checkpoint has
one, as validation scored it) into a fresh run: new optimizer, step 0, the new data and schedule.
"""

from __future__ import annotations

import os

import lightning as L
from lightning.pytorch.utilities import rank_zero_info

from biomoe.checkpoint.read import read_checkpoint
from biomoe.checkpoint.run_folder import resolve_checkpoint
from biomoe.errors import GenomeInputError

__all__ = ["InitWeights"]


class InitWeights(L.Callback):
    """Load ``checkpoint``'s model weights before training starts (a file, or a run folder: its
    best checkpoint). The architecture must match (``model.config`` as the checkpoint's); a
    mismatch is one line naming the first differing tensor.

    A weight average (``EMAWeightAveraging``) starts from these weights too: its first update
    copies the weights it is given. Single-device and data-parallel runs; sharded strategies build
    the model later.
    """

    def __init__(self, checkpoint: str) -> None:
        super().__init__()
        self.checkpoint = checkpoint
        self.loaded_from: str | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit" or self.loaded_from is not None:
            return
        path = resolve_checkpoint(self.checkpoint)
        if not os.path.isfile(path):
            raise GenomeInputError(path, "InitWeights needs a checkpoint file (or a run folder holding one)")
        pl_module.configure_model()  # the model exists from here on (idempotent)
        ckpt = read_checkpoint(path)
        state = (ckpt.get("state_dict") if isinstance(ckpt, dict) else None) or {}
        weights = {k[len("model."):]: v for k, v in state.items() if k.startswith("model.")}
        own = pl_module.model.state_dict()
        for name, tensor in own.items():
            if name not in weights:
                raise GenomeInputError(path, f"InitWeights: the checkpoint has no weight '{name}' "
                                             "(another architecture?)")
            if tuple(weights[name].shape) != tuple(tensor.shape):
                raise GenomeInputError(path, f"InitWeights: '{name}' is {tuple(weights[name].shape)} in the "
                                             f"checkpoint, {tuple(tensor.shape)} in this model (model.config differs)")
        pl_module.model.load_state_dict({name: weights[name] for name in own})
        self.loaded_from = path
        rank_zero_info(f"initial weights from {path}")
