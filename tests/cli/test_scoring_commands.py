"""validate, test and predict as README writes them: the checkpoint first, results where the run is,
no log folder where they are run, the user's batch limits, and none of Lightning's tips."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from biomoe.cli.main import main
from conftest import ROOT, save_checkpoint

LAMBDA = str(ROOT / "data/lambda_virus.fa.gz")
TINY = str(ROOT / "configs/tiny.yaml")


@pytest.fixture
def run_checkpoint(tmp_path: Path) -> Path:
    """A checkpoint where fit keeps one (``run/version_0/checkpoints/last.ckpt``), recording its data."""
    import torch

    from biomoe.model.config import ModelConfig
    from biomoe.model.transformer import MoETransformer
    from conftest import TINY_MODEL

    torch.manual_seed(0)
    cfg = ModelConfig(**TINY_MODEL)
    folder = tmp_path / "run" / "version_0" / "checkpoints"
    folder.mkdir(parents=True)
    data = {"fasta": LAMBDA, "seq_length": 128, "val_fraction": 0.02, "batch_size": 8}
    path = save_checkpoint(folder / "last.ckpt", MoETransformer(cfg), cfg, data)
    ckpt = torch.load(path, weights_only=False)
    ckpt["pytorch-lightning_version"] = "2.5.0"  # Lightning reads it first
    torch.save(ckpt, path)
    return path


def _metric(stdout: str, name: str) -> float:
    match = re.search(re.escape(name) + r"\s*[│|]\s*([0-9.]+)", stdout)
    assert match, stdout[-3000:]
    return float(match.group(1))


@pytest.mark.parametrize("command", ["validate", "test", "predict"])
def test_checkpoint_as_first_argument_and_no_log_folder_where_run(command: str, run_checkpoint: Path, tmp_path: Path,
                                                                  monkeypatch, capsys) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    code = main([command, str(run_checkpoint), "--trainer.enable_progress_bar", "false"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    assert list(work.iterdir()) == []  # no lightning_logs/version_N, no config.yaml
    if command == "predict":
        version = run_checkpoint.parent.parent
        assert (version / "predictions" / "window_scores.tsv").is_file()
    assert not (run_checkpoint.parent.parent.parent / "version_1").exists()


def test_a_second_predict_never_replaces_the_first(run_checkpoint: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    version = run_checkpoint.parent.parent
    for _ in range(2):
        assert main(["predict", str(run_checkpoint), "--trainer.enable_progress_bar", "false"]) == 0
    capsys.readouterr()
    assert (version / "predictions" / "window_scores.tsv").is_file()
    assert (version / "predictions_1" / "window_scores.tsv").is_file()


def test_test_on_the_validation_split_keeps_the_given_batch_limit(run_checkpoint: Path, tmp_path: Path,
                                                                  capsys) -> None:
    common = [str(run_checkpoint), "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir",
              str(tmp_path), "--config", TINY, "--data.val_fraction", "0.1"]  # tiny.yaml: limit_val_batches 4
    assert main(["validate", *common]) == 0
    four = _metric(capsys.readouterr().out, "val/bits_per_base")
    assert main(["validate", *common, "--trainer.limit_val_batches", "2"]) == 0
    two = _metric(capsys.readouterr().out, "val/bits_per_base")
    assert main(["test", *common, "--trainer.limit_test_batches", "2"]) == 0
    tested = _metric(capsys.readouterr().out, "test/bits_per_base")
    assert two != pytest.approx(four, abs=1e-5)
    assert tested == pytest.approx(two, abs=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["validate", "test", "predict"])
def test_scoring_a_fitted_run_prints_none_of_lightnings_tips(command: str, tmp_path: Path, capsys) -> None:
    root = ["--trainer.default_root_dir", str(tmp_path)]
    assert main(["fit", "--config", TINY, "--data.fasta", LAMBDA, "--trainer.max_steps", "2",
                 "--trainer.val_check_interval", "2", *root]) == 0
    capsys.readouterr()
    assert main([command, str(tmp_path), "--config", TINY, *root]) == 0
    captured = capsys.readouterr()
    said = captured.out + captured.err
    for tip in ("litmodels", "No seed found", "Please add the following callbacks"):
        assert tip not in said, said[-3000:]
