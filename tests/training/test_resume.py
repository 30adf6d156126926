"""Exact resume: a run resumed mid-epoch from a step-N checkpoint reproduces the uninterrupted run.

Bit-exact on CPU: per-step losses, batches (data order and reverse-complement flips), the routers'
expert bias and the global RNG, across a validation and an epoch boundary.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from biomoe.cli.main import main
from biomoe.data.datamodule import GenomeDataModule, ResumableBatchSampler
from conftest import ROOT

STOP = 11  # 64 windows / batch 8 = 8 batches per epoch: step 11 is mid-epoch 1, after a validation

EVERY_STOP = f'every_n_train_steps: {STOP}, save_top_k: -1, filename: "{{step}}"'
"""A checkpoint at step STOP (the resume tests start from it)."""
SAVE_LAST = "save_last: true, save_top_k: 0"
"""last.ckpt only: what SaveOnSigterm writes into when the run is stopped."""

RUN_YAML = """
trainer:
  max_steps: 20
  limit_val_batches: 2
  val_check_interval: 7
  log_every_n_steps: 1
  enable_model_summary: false
  logger: false
  callbacks:
    - class_path: lightning.pytorch.callbacks.ModelCheckpoint
      init_args: {{{checkpoint}}}
    - class_path: helpers.recorder.StepRecorder
      init_args: {{path: {record}}}
model:
  config: {{router_bias_update_rate: 0.01}}
  optim: {{max_steps: 20}}
data:
  fasta: {fasta}
  max_train_windows: 64
"""


def _fit(tmp: Path, name: str, *extra: str) -> list[dict]:
    record = tmp / f"{name}.jsonl"
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(RUN_YAML.format(checkpoint=EVERY_STOP, record=record, fasta=ROOT / "data/lambda_virus.fa.gz"))
    code = main(["fit", "--config", str(ROOT / "configs/tiny.yaml"), "--config", str(cfg),
                 "--trainer.default_root_dir", str(tmp / name), *extra])
    assert code == 0
    return [json.loads(line) for line in record.read_text().splitlines()]


@pytest.mark.slow
def test_resume_mid_epoch_is_bit_exact(tmp_path: Path) -> None:
    full = _fit(tmp_path, "full")
    ckpt = next((tmp_path / "full").rglob(f"step={STOP}.ckpt"))
    state = torch.load(ckpt, weights_only=True)  # also: loadable without unpickling code
    loader_state = state["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    assert loader_state == {"epoch": 1, "batches": STOP - 8}  # genuinely mid-epoch

    resumed = _fit(tmp_path, "resumed", "--ckpt_path", str(ckpt))
    assert [r["step"] for r in resumed] == list(range(STOP + 1, 21))
    reference = {r["step"]: r for r in full}
    assert any(r["bias"] != full[0]["bias"] for r in resumed)  # the bias is really moving
    for row in resumed:
        expected = reference[row["step"]]
        assert row["batch"] == expected["batch"], f"step {row['step']}: different data"
        assert row["loss"] == expected["loss"], f"step {row['step']}: loss differs"
        assert row["bias"] == expected["bias"], f"step {row['step']}: router bias differs"
        assert row["rng"] == expected["rng"], f"step {row['step']}: global RNG differs"


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_that_resumes_bit_exactly(tmp_path: Path) -> None:
    """What a scheduler does: SIGTERM mid-fit, then the same command again. The first run stops at
    the next step boundary with exit 143, one line and a last.ckpt; ``--ckpt_path last`` (given from
    the first start: with no checkpoint yet it trains from step 0) continues as if never stopped."""
    full = _fit(tmp_path, "full")
    record = tmp_path / "stopped.jsonl"
    cfg = tmp_path / "stopped.yaml"
    cfg.write_text(RUN_YAML.format(checkpoint=SAVE_LAST, record=record, fasta=ROOT / "data/lambda_virus.fa.gz"))
    command = [sys.executable, str(ROOT / "cli.py"), "fit", "--config", str(ROOT / "configs/tiny.yaml"),
               "--config", str(cfg), "--trainer.default_root_dir", str(tmp_path / "stopped"),
               "--ckpt_path", "last"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    stopped = subprocess.run([*command, "--trainer.callbacks+", "helpers.signals.SignalAtStep",
                              "--trainer.callbacks.step", str(STOP)],
                             env=env, capture_output=True, text=True, timeout=600)
    assert stopped.returncode == 143, stopped.stderr[-2000:]
    assert "Traceback" not in stopped.stderr
    assert "no last*.ckpt under" in stopped.stderr and "training from the start" in stopped.stderr
    lines = [line for line in stopped.stderr.splitlines() if "stopped by SIGTERM" in line]
    assert len(lines) == 1 and f"after step {STOP};" in lines[0], stopped.stderr[-2000:]
    saved = Path(lines[0].split("resumable checkpoint ", 1)[1].split(";", 1)[0])
    assert saved.name == "last.ckpt" and torch.load(saved, weights_only=True)["global_step"] == STOP

    resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"using {saved}" in resumed.stderr
    rows = [json.loads(line) for line in record.read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 21))  # 1..STOP before the signal, the rest after
    for row, expected in zip(rows, full):
        for key in ("batch", "loss", "bias", "rng"):
            assert row[key] == expected[key], f"step {row['step']}: {key} differs from the uninterrupted run"


def _train_loader(tmp_path: Path) -> DataLoader:
    dm = GenomeDataModule(fasta=str(ROOT / "data/lambda_virus.fa.gz"), seq_length=128, batch_size=4,
                          cache_dir=str(tmp_path), rc_prob=0.5, seed=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dm.setup("fit")
    return dm.train_dataloader()


def _labels(batches) -> list[list[int]]:
    return [b["labels"][:, :4].tolist() for b in batches]


def test_loader_state_skips_consumed_batches_and_reshuffles_per_epoch(tmp_path: Path) -> None:
    loader = _train_loader(tmp_path)
    epoch0 = _labels(loader)
    it = iter(_train_loader(tmp_path))
    assert _labels([next(it), next(it), next(it)]) == epoch0[:3]  # same seed -> same order
    fresh = _train_loader(tmp_path)
    fresh.load_state_dict({"epoch": 0, "batches": 3})
    assert _labels(fresh) == epoch0[3:]
    assert fresh.state_dict() == {"epoch": 0, "batches": len(epoch0)}
    assert _labels(fresh) != epoch0  # next epoch: new order, not skipped again


def test_lightning_distributed_sampler_injection_keeps_resumable_batches(tmp_path: Path) -> None:
    """What Lightning does under DDP: re-create the loader around a DistributedSampler."""
    from lightning.fabric.utilities.data import _replace_dunder_methods
    from lightning.pytorch.utilities.data import _update_dataloader

    with _replace_dunder_methods(DataLoader, "dataset"), _replace_dunder_methods(BatchSampler):
        loader = _train_loader(tmp_path)
    loader.dataset.epoch_source = lambda: 0  # as the trainer does: every pass below is epoch 0
    ranks = []
    for rank in range(2):
        sampler = DistributedSampler(loader.dataset, num_replicas=2, rank=rank, shuffle=True, seed=0)
        sampler.set_epoch(0)
        dist_loader = _update_dataloader(loader, sampler)
        assert isinstance(dist_loader.batch_sampler, ResumableBatchSampler)
        assert dist_loader.batch_sampler.sampler is sampler
        whole = _labels(dist_loader)
        resumed = _update_dataloader(loader, sampler)
        resumed.load_state_dict({"epoch": 0, "batches": 2})
        assert _labels(resumed) == whole[2:]  # per-rank skip
        ranks.append(whole)
    assert ranks[0] != ranks[1]


@pytest.mark.slow
def test_ctrl_c_mid_fit_is_exit_130_in_one_line(tmp_path: Path) -> None:
    """Ctrl-C is the user's stop, not a scheduler's: exit 130, one line, no traceback."""
    cfg = tmp_path / "run.yaml"
    cfg.write_text(RUN_YAML.format(checkpoint=SAVE_LAST, record=tmp_path / "r.jsonl",
                                   fasta=ROOT / "data/lambda_virus.fa.gz"))
    result = subprocess.run([sys.executable, str(ROOT / "cli.py"), "fit", "--config", str(ROOT / "configs/tiny.yaml"),
                             "--config", str(cfg), "--trainer.default_root_dir", str(tmp_path / "run"),
                             "--trainer.callbacks+", "helpers.signals.SignalAtStep", "--trainer.callbacks.step", "3",
                             "--trainer.callbacks.signum", "SIGINT"],
                            env={**os.environ, "PYTHONPATH": str(ROOT / "tests")}, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 130, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "stopped by SIGTERM" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("biomoe: interrupted (Ctrl-C)")


@pytest.mark.slow
def test_ctrl_c_during_validation_saves_the_steps_so_far_and_resumes_bit_exactly(tmp_path: Path) -> None:
    """A Ctrl-C while the validation after step 7 runs (the EMA's average in the module) writes
    last.ckpt of step 7 and names the command that resumes it; that run then trains as if never
    stopped."""
    ema = ["--trainer.callbacks+", "biomoe.training.optimization.ema.EMAWeightAveraging"]
    full = _fit(tmp_path, "full", *ema)
    record = tmp_path / "stopped.jsonl"
    cfg = tmp_path / "stopped.yaml"
    cfg.write_text(RUN_YAML.format(checkpoint=SAVE_LAST, record=record, fasta=ROOT / "data/lambda_virus.fa.gz"))
    command = [sys.executable, str(ROOT / "cli.py"), "fit", "--config", str(ROOT / "configs/tiny.yaml"),
               "--config", str(cfg), "--trainer.default_root_dir", str(tmp_path / "stopped"), *ema]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    stopped = subprocess.run([*command, "--trainer.callbacks+", "helpers.signals.SignalDuringValidation",
                              "--trainer.callbacks.step", "7"], env=env, capture_output=True, text=True, timeout=600)
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    last_line = stopped.stderr.strip().splitlines()[-1]
    assert last_line.startswith("biomoe: interrupted (Ctrl-C) at step 7; saved: "), last_line
    saved = Path(last_line.split("saved: ", 1)[1].split(" (step", 1)[0])
    assert saved.name == "last.ckpt" and "(step 7); resume with: " in last_line and "--ckpt_path" in last_line
    assert "the resumed run writes a new version folder" in last_line  # not the one the line names
    assert torch.load(saved, weights_only=True)["global_step"] == 7

    resumed = subprocess.run([*command, "--ckpt_path", str(saved)], env=env, capture_output=True, text=True,
                             timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    rows = [json.loads(line) for line in record.read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 21))
    for row, expected in zip(rows, full):
        for key in ("batch", "loss", "bias", "rng"):
            assert row[key] == expected[key], f"step {row['step']}: {key} differs from the uninterrupted run"
