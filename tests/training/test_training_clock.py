"""``train/seconds``: a run's training time, validation left out, carried through a resume."""

from __future__ import annotations

import csv
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from biomoe.data.datamodule import GenomeDataModule
from biomoe.model.config import ModelConfig, OptimConfig
from biomoe.training.step import lightning_module
from biomoe.training.step.lightning_module import BioMoEModule
from biomoe.training.step.training_clock import CHECKPOINT_KEY, TrainingClock
from conftest import ROOT

STEP = 1.0  # fake seconds each training batch takes
PAUSE = 100.0  # fake seconds each validation batch takes


class FakeClock:
    """The host clock the module reads (``time.perf_counter``), moved only by the callbacks below:
    the test checks what the clock counts, whatever the machine's speed."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now


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


class Elapse(L.Callback):
    """Training batches take STEP seconds of the fake clock, validation batches PAUSE."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.clock.now += STEP

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self.clock.now += PAUSE


def _fit(root: Path, max_steps: int, clock: FakeClock,
         ckpt_path: str | None = None) -> tuple[BioMoEModule, list[dict]]:
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
                        callbacks=[Elapse(clock), ModelCheckpoint(dirpath=root / "ckpt", save_last=True)])
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path, weights_only=False)  # our own file
    with open(Path(logger.log_dir) / "metrics.csv") as handle:
        rows = [r for r in csv.DictReader(handle) if r.get("train/seconds")]
    return module, rows


def test_validation_is_not_training_time_and_a_resumed_run_counts_on(tmp_path, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(lightning_module, "time", clock)
    module, rows = _fit(tmp_path, 6, clock)
    seconds = [float(r["train/seconds"]) for r in rows]
    assert [int(r["step"]) for r in rows] == [1, 3, 5]  # logged at steps 2, 4 and 6 (zero-based 1, 3, 5)
    # the clock starts at the first step's end; validations (PAUSE each, after steps 2, 4 and 6) are
    # left out, so the total is the training steps' time after the first
    assert seconds == [1 * STEP, 3 * STEP, 5 * STEP] and module._clock.total == 5 * STEP
    assert [float(r["train/tokens_per_s"]) for r in rows] == [4 * 64 / STEP] * 3
    last = tmp_path / "ckpt" / "last.ckpt"
    assert torch.load(last, weights_only=False)[CHECKPOINT_KEY] == module._clock.total

    resumed, more = _fit(tmp_path, 10, clock, ckpt_path=str(last))
    assert [int(r["step"]) for r in more] == [7, 9]
    # continues from the checkpoint's total; the resumed run's first step starts its clock again
    assert [float(r["train/seconds"]) for r in more] == [6 * STEP, 8 * STEP]
    assert resumed._clock.total == 8 * STEP
