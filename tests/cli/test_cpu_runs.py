"""A GPU recipe run unchanged on a CPU: a precision that is fast there, a time limit that holds, and
a summary that says how much disk the checkpoints take."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from jsonargparse import Namespace

from biomoe.cli.main import main
from biomoe.cli.run import trainer_setup
from biomoe.cli.run.summary import format_size
from biomoe.training.reports.history import recorded_precision
from conftest import ROOT

LAMBDA = ROOT / "data/lambda_virus.fa.gz"


def tiny_fit(tmp_path: Path, *extra: str) -> list[str]:
    return ["fit", "--config", str(ROOT / "configs/tiny.yaml"), "--data.fasta", str(LAMBDA),
            "--data.cache_dir", str(tmp_path / "cache"), "--data.max_train_windows", "32",
            "--trainer.enable_model_summary", "false", "--trainer.default_root_dir", str(tmp_path / "run"), *extra]


def section(precision: str, accelerator: str = "auto") -> Namespace:
    return Namespace(trainer=Namespace(precision=precision, accelerator=accelerator))


def test_a_gpu_precision_from_a_config_becomes_fp32_on_a_cpu(monkeypatch) -> None:
    monkeypatch.setattr(trainer_setup, "available_accelerators", lambda: ["cpu"])
    for precision in ("bf16-mixed", "bf16-true"):
        config = section(precision)
        note = trainer_setup.choose_cpu_precision(config, set())
        assert config.trainer.precision == "32-true"
        assert note.startswith(f"biomoe: note: running in 32-true on this CPU: the config's trainer.precision "
                               f"{precision} is for GPUs")
    assert trainer_setup.choose_cpu_precision(section("32-true"), set()) is None


def test_a_precision_given_on_the_command_line_or_a_gpu_run_is_kept(monkeypatch) -> None:
    monkeypatch.setattr(trainer_setup, "available_accelerators", lambda: ["cpu"])
    given = section("bf16-mixed")
    note = trainer_setup.choose_cpu_precision(given, {"trainer.precision"})
    assert given.trainer.precision == "bf16-mixed" and "as given" in note and "slower" in note
    monkeypatch.setattr(trainer_setup, "available_accelerators", lambda: ["gpu (cuda)", "cpu"])
    on_gpu = section("bf16-mixed")
    assert trainer_setup.choose_cpu_precision(on_gpu, set()) is None and on_gpu.trainer.precision == "bf16-mixed"
    on_cpu = section("bf16-mixed", accelerator="cpu")  # a GPU machine told to use its CPU
    assert trainer_setup.choose_cpu_precision(on_cpu, set()) is not None and on_cpu.trainer.precision == "32-true"


@pytest.mark.slow
def test_a_bf16_recipe_trains_in_fp32_on_a_cpu_and_the_summary_gives_checkpoint_sizes(tmp_path, capsys) -> None:
    recipe = tmp_path / "bf16.yaml"
    recipe.write_text("trainer:\n  precision: bf16-mixed\n")
    argv = tiny_fit(tmp_path, "--config", str(recipe), "--trainer.max_steps", "2", "--trainer.val_check_interval",
                    "2", "--trainer.limit_val_batches", "1")
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "biomoe: note: running in 32-true on this CPU: the config's trainer.precision bf16-mixed" in captured.err
    last = next((tmp_path / "run").rglob("last.ckpt"))
    assert recorded_precision(torch.load(last, weights_only=True)) == "32-true"
    line = next(line for line in captured.out.splitlines() if line.startswith(f"checkpoint: {last} ("))
    assert line == f"checkpoint: {last} ({format_size(last.stat().st_size)})"


def test_sizes_read_in_the_unit_that_fits() -> None:
    assert [format_size(n) for n in (512, 12_300, 45_600_000, 1_700_000_000)] == ["512 B", "12.3 kB", "45.6 MB",
                                                                                  "1.7 GB"]


@pytest.mark.slow
def test_max_time_stops_at_the_next_step_end_without_another_validation(tmp_path, capsys) -> None:
    """Steps of 0.4 s and validations of 4 x 1 s, due every 6 steps, and a 2 s limit: Lightning
    stopped at the step end past 2 s, then validated once more (4 s past the limit); the run now
    ends at that step end."""
    record = tmp_path / "times.json"
    argv = tiny_fit(tmp_path, "--trainer.max_steps", "1000", "--trainer.max_time", "00:00:00:02",
                    "--trainer.val_check_interval", "6", "--trainer.limit_val_batches", "4",
                    "--trainer.num_sanity_val_steps", "0", "--trainer.callbacks+", "helpers.slow.SlowSteps",
                    "--trainer.callbacks.path", str(record), "--trainer.callbacks.train_s", "0.4",
                    "--trainer.callbacks.val_s", "1.0")
    assert main(argv) == 0
    times = json.loads(record.read_text())
    assert times["val_batches"] == 0, times  # no validation once the time was up
    past = [end for end in times["step_ends"] if end >= 2.0]
    assert len(past) == 1, times  # the step that crossed the limit is the last one
    assert times["train_s"] - past[0] < 1.0, times  # and training ends right after it
    assert f"trainer.max_time (0:00:02) reached after step {times['steps']}" in capsys.readouterr().err
