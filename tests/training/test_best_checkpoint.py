"""BestCheckpoint: a full checkpoint less the optimizer state, for the files only read to score."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.demos.boring_classes import BoringModel

from biomoe.checkpoint.run_folder import best_recorded
from biomoe.cli.run.config_checks import validate_config
from biomoe.errors import ConfigError
from biomoe.training.guards.best_checkpoint import BestCheckpoint


class Marker(L.Callback):
    """A callback that writes its part in ``on_save_checkpoint`` (as the EMA does)."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        checkpoint["marker"] = trainer.global_step


class Scored(BoringModel):
    def validation_step(self, batch, batch_idx):
        self.log("valid_loss_step", 1.0)


def test_only_its_own_files_lose_the_optimizer_state(tmp_path):
    best = BestCheckpoint(dirpath=tmp_path, filename="best", monitor="valid_loss_step", mode="min", save_top_k=1)
    last = ModelCheckpoint(dirpath=tmp_path, save_last=True, save_top_k=0)
    model = Scored()
    trainer = L.Trainer(accelerator="cpu", max_epochs=1, limit_train_batches=2, limit_val_batches=1, logger=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        default_root_dir=tmp_path, callbacks=[best, last, Marker()])
    trainer.fit(model)
    kept = torch.load(tmp_path / "best.ckpt", weights_only=False)
    full = torch.load(tmp_path / "last.ckpt", weights_only=False)
    assert not {"optimizer_states", "lr_schedulers"} & set(kept) and full["optimizer_states"]
    assert kept["marker"] == 2 and {"callbacks", "loops", "state_dict"} <= set(kept)
    # recorded under a ModelCheckpoint key, so the run-folder rule finds it
    assert best.state_key.startswith("ModelCheckpoint{") and best.state_key in full["callbacks"]
    assert best_recorded(tmp_path / "last.ckpt")[0] == str(tmp_path / "best.ckpt")


def test_it_keeps_a_model_checkpoints_state_key():
    args = {"monitor": "val/bits_per_base", "mode": "min", "every_n_epochs": 1}
    assert BestCheckpoint(**args).state_key == ModelCheckpoint(**args).state_key


@pytest.mark.parametrize("save_last", [True, "link"])
def test_a_last_checkpoint_without_optimizer_state_is_refused(save_last):
    with pytest.raises(ValueError, match="save_last on a ModelCheckpoint of its own"):
        BestCheckpoint(save_last=save_last)
    config = {"trainer": {"callbacks": [{"class_path": "biomoe.training.guards.best_checkpoint.BestCheckpoint",
                                         "init_args": {"save_last": save_last}}]}}
    with pytest.raises(ConfigError, match="save_last: must be off"):
        validate_config(config)
