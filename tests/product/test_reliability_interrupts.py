"""Ctrl-C keeps what has trained: before the first checkpoint, inside a step or in a validation, the
run stops with ``last.ckpt`` of its newest whole step, and resuming it trains on as if never
stopped, running again the validation the Ctrl-C cut short."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import ROOT

RUN_YAML = """
trainer:
  max_steps: 12
  limit_val_batches: 2
  val_check_interval: 5
  log_every_n_steps: 1
  enable_model_summary: false
  logger: false
  callbacks:
    - class_path: lightning.pytorch.callbacks.ModelCheckpoint
      init_args: {{save_last: true, save_top_k: 0}}
    - class_path: helpers.recorder.StepRecorder
      init_args: {{path: {steps}}}
    - class_path: helpers.recorder.ValidationRecorder
      init_args: {{path: {validations}}}
data:
  fasta: {fasta}
  max_train_windows: 64
"""


def _command(tmp: Path, name: str) -> list[str]:
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(RUN_YAML.format(steps=tmp / f"{name}.steps.jsonl", validations=tmp / f"{name}.val.jsonl",
                                   fasta=ROOT / "data/lambda_virus.fa.gz"))
    return [sys.executable, str(ROOT / "cli.py"), "fit", "--config", str(ROOT / "configs/tiny.yaml"), "--config",
            str(cfg), "--trainer.default_root_dir", str(tmp / name)]


def _run(command: list[str], *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([*command, *extra], env={**os.environ, "PYTHONPATH": str(ROOT / "tests")},
                          capture_output=True, text=True, timeout=600)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _stopped_and_resumed(tmp_path: Path, signal_callback: list[str], step: int) -> tuple[list[dict], Path]:
    full = _run(_command(tmp_path, "full"))
    assert full.returncode == 0, full.stderr[-2000:]
    command = _command(tmp_path, "stopped")
    stopped = _run(command, "--trainer.callbacks+", *signal_callback)
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    assert "Traceback" not in stopped.stderr
    last = stopped.stderr.strip().splitlines()[-1]
    assert last.startswith(f"biomoe: interrupted (Ctrl-C) at step {step}; saved: "), last
    saved = Path(last.split("saved: ", 1)[1].split(" (step", 1)[0])
    assert saved.name == "last.ckpt" and torch.load(saved, weights_only=True)["global_step"] == step
    resumed = _run(command, "--ckpt_path", str(saved))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    steps = _lines(tmp_path / "stopped.steps.jsonl")
    assert [r["step"] for r in steps] == list(range(1, 13))
    for row, expected in zip(steps, _lines(tmp_path / "full.steps.jsonl")):
        for key in ("batch", "loss", "bias", "rng"):
            assert row[key] == expected[key], f"step {row['step']}: {key} differs from the uninterrupted run"
    return _lines(tmp_path / "stopped.val.jsonl"), tmp_path


@pytest.mark.slow
def test_ctrl_c_inside_a_step_before_any_checkpoint_saves_that_step(tmp_path: Path) -> None:
    """No checkpoint yet (the first comes at step 5): a Ctrl-C during step 3's backward pass lets
    step 3 finish, saves it, and the resumed run is the uninterrupted one."""
    validations, _ = _stopped_and_resumed(tmp_path, ["helpers.signals.SignalMidStep", "--trainer.callbacks.step",
                                                     "3"], step=3)
    assert validations == _lines(tmp_path / "full.val.jsonl")


@pytest.mark.slow
def test_a_second_ctrl_c_inside_a_step_stops_at_once(tmp_path: Path) -> None:
    stopped = _run(_command(tmp_path, "stopped"), "--trainer.callbacks+", "helpers.signals.SignalMidStep",
                   "--trainer.callbacks.step", "3", "--trainer.callbacks.times", "2")
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    lines = stopped.stderr.strip().splitlines()
    assert "biomoe: Ctrl-C: finishing this step to save it (Ctrl-C again stops at once)" in lines
    assert lines[-1].startswith("biomoe: interrupted (Ctrl-C) at step 2; nothing of this run was saved"), lines[-1]
    assert "Traceback" not in stopped.stderr


@pytest.mark.slow
def test_ctrl_c_in_a_validation_runs_that_validation_again_on_resume(tmp_path: Path) -> None:
    validations, _ = _stopped_and_resumed(tmp_path, ["helpers.signals.SignalDuringValidation",
                                                     "--trainer.callbacks.step", "5"], step=5)
    full = _lines(tmp_path / "full.val.jsonl")
    assert full == [{"step": 5, "batches": 2}, {"step": 10, "batches": 2}]
    assert validations == full  # the cut-short one ran again, whole, in the resumed run

