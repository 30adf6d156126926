"""biomoe's EMA of the weights: built on the trainer's device unless told otherwise."""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.demos.boring_classes import BoringModel

from biomoe.compat import lightning as lightning_compat
from biomoe.training.ema import EMAWeightAveraging


def test_weight_averaging_device_is_read_and_set_where_lightning_keeps_it():
    callback = EMAWeightAveraging(decay=0.9)
    assert lightning_compat.weight_averaging_device(callback) is None  # Lightning's default
    assert lightning_compat.weight_averaging_device(EMAWeightAveraging(device="cpu")) == torch.device("cpu")
    lightning_compat.set_weight_averaging_device(callback, torch.device("meta"))
    assert lightning_compat.weight_averaging_device(callback) == torch.device("meta")


def test_average_is_built_on_the_trainers_device_and_an_explicit_device_wins(tmp_path):
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    default, explicit = EMAWeightAveraging(decay=0.9), EMAWeightAveraging(decay=0.9, device="meta")
    module = BoringModel()
    default.setup(trainer, module, "fit")
    assert lightning_compat.weight_averaging_device(default) == trainer.strategy.root_device
    explicit.setup(trainer, module, "fit")
    assert lightning_compat.weight_averaging_device(explicit) == torch.device("meta")
    assert type(default).__name__ == "EMAWeightAveraging"  # checkpoint state keys match Lightning's callback
