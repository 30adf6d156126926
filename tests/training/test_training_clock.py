"""``train/seconds``: a run's training time, validation left out, carried through a resume."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from biomoe.data.datamodule import GenomeDataModule
from biomoe.model.config import ModelConfig, OptimConfig
from biomoe.training.step.lightning_module import BioMoEModule
from biomoe.training.step.training_clock import CHECKPOINT_KEY, TrainingClock
from conftest import ROOT

PAUSE = 1.5  # seconds each validation batch sleeps: far longer than the tiny model's training steps


def test_laps_leave_out_the_paused_time_and_the_total_survives_a_checkpoint():
    clock = TrainingClock()
    assert clock.lap(10.0) is None and clock.total == 0.0  # the first lap starts the clock
    clock.pause(11.0)
    clock.resume(15.0)  # 4 s of validation
    assert clock.lap(16.0) == 2.0
    assert clock.lap(19.0) == 3.0 and clock.total == 5.0
    saved: dict = {}
    clock.save(saved)
    resumed = TrainingClock()
    resumed.load(saved)
    resumed.restart()
    assert resumed.lap(100.0) is None and resumed.lap(101.0) == 1.0 and resumed.total == 6.0


class SlowValidation(L.Callback):
    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        time.sleep(PAUSE)


def _fit(root: Path, max_steps: int, ckpt_path: str | None = None) -> tuple[BioMoEModule, list[dict]]:
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                      ffn_hidden_size=32)
    module = BioMoEModule(cfg, OptimConfig(lr=3e-3, warmup_steps=2, max_steps=10))
    dm = GenomeDataModule(fasta=str(ROOT / "data/lambda_virus.fa.gz"), seq_length=64, batch_size=4,
                          val_fraction=0.1, cache_dir=str(root / "cache"))
    logger = CSVLogger(root, name="", version=f"to-{max_steps}")
    trainer = L.Trainer(accelerator="cpu", max_steps=max_steps, logger=logger, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=root,
                        log_every_n_steps=2, val_check_interval=2, limit_val_batches=1,
                        check_val_every_n_epoch=None,
                        callbacks=[SlowValidation(), ModelCheckpoint(dirpath=root / "ckpt", save_last=True)])
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path, weights_only=False)  # our own file
    with open(Path(logger.log_dir) / "metrics.csv") as handle:
        rows = [r for r in csv.DictReader(handle) if r.get("train/seconds")]
    return module, rows


def test_validation_is_not_training_time_and_a_resumed_run_counts_on(tmp_path):
    module, rows = _fit(tmp_path, 6)
    seconds = [float(r["train/seconds"]) for r in rows]
    assert [int(r["step"]) for r in rows] == [1, 3, 5]  # logged at steps 2, 4 and 6 (zero-based 1, 3, 5)
    assert seconds == sorted(seconds) and seconds[-1] == module._clock.total > 0
    # two validations (after steps 2 and 4) slept inside the timed laps: none of it is counted
    assert seconds[-1] < PAUSE, seconds
    for rate in (float(r["train/tokens_per_s"]) for r in rows):
        assert rate > 2 * 4 * 64 / PAUSE  # two steps of 256 tokens are not timed with a validation in them
    last = tmp_path / "ckpt" / "last.ckpt"
    assert torch.load(last, weights_only=False)[CHECKPOINT_KEY] == module._clock.total

    resumed, more = _fit(tmp_path, 10, ckpt_path=str(last))
    assert [int(r["step"]) for r in more] == [7, 9]
    assert float(more[0]["train/seconds"]) > seconds[-1]  # continues from the checkpoint's total
    assert resumed._clock.total < seconds[-1] + PAUSE
