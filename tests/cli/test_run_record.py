"""A run's record (config.yaml, checkpoints) changes only once a new run really starts: a fit that
stops at start, for a checkpoint of another model or data that cannot be used, leaves the
previous run's files as they were, and says what is wrong in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from biomoe.cli.main import main
from conftest import ROOT


def _fit(tmp: Path, *extra: str, fasta: Path = ROOT / "data/lambda_virus.fa.gz") -> int:
    return main(["fit", "--config", str(ROOT / "configs/tiny.yaml"), "--data.fasta", str(fasta),
                 "--data.cache_dir", str(tmp / "cache"), "--data.max_train_windows", "16",
                 "--trainer.default_root_dir", str(tmp / "run"), "--trainer.logger", "false",
                 "--trainer.limit_val_batches", "1", "--trainer.max_steps", "2", *extra])


def _record(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def _last_error(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.startswith("biomoe: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-2000:]
    return lines[0]


@pytest.mark.slow
def test_a_failed_start_leaves_the_previous_run_unchanged(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    assert _fit(tmp_path) == 0
    run = tmp_path / "run"
    before = _record(run)
    assert "config.yaml" in before and any(name.endswith("last.ckpt") for name in before)
    capsys.readouterr()

    # A resume whose model options disagree with the newest last checkpoint (another run's) stops
    # before anything is built, naming each difference.
    assert _fit(tmp_path, "--ckpt_path", "last", "--model.config.hidden_size", "64",
                "--model.config.num_layers", "3", "--trainer.max_steps", "4") != 0
    line = _last_error(capsys.readouterr().err)
    assert "ckpt_path 'last'" in line and "is another run's" in line
    assert "hidden_size: 64 here, 32 in the checkpoint" in line and "num_layers: 3 here, 2 in the checkpoint" in line
    assert _record(run) == before

    # Data that cannot be used is found at setup, before the run writes its config.
    short = tmp_path / "short.fa"
    short.write_text(">s\nACGTACGT\n")
    assert _fit(tmp_path, "--data.packing", "false", fasta=short) != 0  # packed, 8 bases would train
    assert "shorter than seq_length" in _last_error(capsys.readouterr().err)
    assert _record(run) == before

    # A failure after setup, before the first step (restore, strategy, sanity check): still unchanged.
    assert _fit(tmp_path, "--trainer.callbacks+", "helpers.faults.FailOnFitStart", "--trainer.max_steps", "4") != 0
    assert "stopped on purpose" in _last_error(capsys.readouterr().err)
    assert _record(run) == before

    # A checkpoint without optimizer state (weights-only, a best one) cannot be resumed: said before it is built.
    weights = tmp_path / "weights.ckpt"
    state = torch.load(run / "checkpoints/last.ckpt", weights_only=True)
    torch.save({k: v for k, v in state.items() if k not in ("optimizer_states", "lr_schedulers")}, weights)
    assert _fit(tmp_path, "--ckpt_path", str(weights), "--trainer.max_steps", "4") != 0
    assert "holds no optimizer state" in _last_error(capsys.readouterr().err)
    assert _record(run) == before

    # The same options resume; the record then describes the resumed run.
    assert _fit(tmp_path, "--ckpt_path", "last", "--trainer.max_steps", "4") == 0
    assert _record(run)["config.yaml"] != before["config.yaml"]
