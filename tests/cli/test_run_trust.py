"""Runs a user can trust: one option moves a run, ``--ckpt_path last`` resumes only the same run,
a run folder compares only comparable runs, a failed start leaves no folder, an interrupted run
says what was saved, and a config that cannot fit in memory stops before it starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from jsonargparse import Namespace

from biomoe.checkpoint.run_folder import resolve_checkpoint
from biomoe.errors import ConfigError
from biomoe.model.config import ModelConfig
from biomoe.cli.run import memory_check, trainer_setup
from biomoe.cli.run.folders import follow_root_dir, options_given, remove_unstarted_run_folder
from biomoe.cli.run.progress_lines import ProgressLines
from biomoe.cli.run.resume import checkpoint_identity, differences, run_identity
from biomoe.training.guards.stop_report import resume_command
from conftest import ROOT

LAMBDA = ROOT / "data/lambda_virus.fa.gz"


def _section(root: str = "runs/default") -> Namespace:
    logger = Namespace(class_path="lightning.pytorch.loggers.CSVLogger", init_args=Namespace(save_dir=root, name=""))
    checkpoint = Namespace(class_path="lightning.pytorch.callbacks.ModelCheckpoint",
                           init_args=Namespace(dirpath=f"{root}/checkpoints", save_last=True))
    return Namespace(trainer=Namespace(default_root_dir=root, logger=logger, callbacks=[checkpoint]))


def test_default_root_dir_on_the_command_line_moves_logger_and_checkpoints() -> None:
    section = _section()
    section.trainer.default_root_dir = "runs/x"
    follow_root_dir(section, options_given(["fit", "--trainer.default_root_dir=runs/x"]))
    assert section.trainer.logger.init_args.save_dir == "runs/x"
    assert section.trainer.callbacks[0].init_args.dirpath is None  # follows the logger's version folder


def test_an_explicit_save_dir_or_a_config_file_root_stays() -> None:
    section = _section()
    section.trainer.default_root_dir = "runs/x"
    follow_root_dir(section, options_given(["--trainer.default_root_dir", "runs/x",
                                            "--trainer.logger.init_args.save_dir", "logs"]))
    assert section.trainer.logger.init_args.save_dir == "runs/default"
    untouched = _section()
    follow_root_dir(untouched, options_given(["--config", "x.yaml"]))  # only the command line moves a run
    assert untouched.trainer.callbacks[0].init_args.dirpath == "runs/default/checkpoints"


def _checkpoint(fasta: Path = LAMBDA, hidden: int = 32, precision: str = "32-true") -> dict:
    return {"datamodule_hyper_parameters": {"fasta": str(fasta), "val_files": None, "test_files": None},
            "hyper_parameters": {"config": {"hidden_size": hidden, "num_layers": 2},
                                 "runtime": {"precision": "bf16"}},
            "callbacks": {"RunRecord": {"trainer_precision": precision, "series": {}}}}


def _command(fasta: Path = LAMBDA, hidden: int = 32, precision: str = "32-true") -> Namespace:
    return Namespace(data=Namespace(fasta=[str(fasta)], val_files=None, test_files=None),
                     model=Namespace(config=Namespace(hidden_size=hidden, num_layers=2),
                                     runtime=Namespace(precision="bf16")),
                     trainer=Namespace(precision=precision))


def test_the_same_run_has_no_differences() -> None:
    assert differences(run_identity(_command()), checkpoint_identity(_checkpoint())) == []


def test_each_difference_is_named_with_both_values(tmp_path: Path) -> None:
    other = tmp_path / "other.fa"
    found = differences(run_identity(_command(other, 64, "bf16")), checkpoint_identity(_checkpoint()))
    assert any(d.startswith("data.fasta:") for d in found)
    assert "model.config.hidden_size: 64 here, 32 in the checkpoint" in found
    assert "trainer.precision: 'bf16-mixed' here, '32-true' in the checkpoint" in found


def _saved(path: Path, fasta: str, age_s: int, best: Path | None = None, score: float = 1.9) -> Path:
    callbacks = {}
    if best is not None:
        callbacks["ModelCheckpoint{'monitor': 'val/bits_per_base'}"] = {
            "monitor": "val/bits_per_base", "best_model_path": str(best), "best_model_score": torch.tensor(score)}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {}, "callbacks": callbacks,
                "datamodule_hyper_parameters": {"fasta": fasta, "val_fraction": 0.1, "seq_length": 128}}, path)
    stamp = 1_700_000_000 - age_s
    os.utime(path, (stamp, stamp))
    return path


def test_a_run_folder_chooses_among_runs_validated_on_the_same_data(tmp_path: Path, capsys) -> None:
    """An older run on another genome with a lower bits/base does not win, and the line says so."""
    runs = tmp_path / "runs"
    old_best = _saved(runs / "version_0/checkpoints/best.ckpt", "a.fa", 50, score=1.2)
    _saved(runs / "version_0/checkpoints/last.ckpt", "a.fa", 40, best=old_best, score=1.2)
    new_best = _saved(runs / "version_1/checkpoints/best-step9.ckpt", "b.fa", 20, score=1.9)
    _saved(runs / "version_1/checkpoints/last.ckpt", "b.fa", 10, best=new_best, score=1.9)
    stray = _saved(runs / "version_1/checkpoints/best-old.ckpt", "a.fa", 5)  # a best* name of the other run
    assert resolve_checkpoint(runs) == str(new_best)
    line = capsys.readouterr().err.strip()
    assert len(line.splitlines()) == 1
    assert "best val/bits_per_base 1.9000" in line and "3 checkpoints of runs validated on other data left out" in line
    assert stray.exists()


def test_a_failed_start_removes_only_an_empty_run_folder(tmp_path: Path) -> None:
    empty = tmp_path / "version_3"
    (empty / "checkpoints").mkdir(parents=True)
    (empty / "hparams.yaml").write_text("{}\n")
    assert remove_unstarted_run_folder(empty) and not empty.exists()
    kept = tmp_path / "version_4"
    (kept / "checkpoints").mkdir(parents=True)
    (kept / "checkpoints" / "last.ckpt").write_bytes(b"x")
    assert not remove_unstarted_run_folder(kept) and (kept / "checkpoints" / "last.ckpt").exists()


def test_an_accelerator_this_machine_lacks_is_one_line_naming_the_key(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"^trainer.accelerator: 'gpu' is not available on this machine; it has: "
                                          r".*cpu"):
        trainer_setup.check_accelerator("gpu")
    trainer_setup.check_accelerator("auto")
    trainer_setup.check_accelerator("cpu")


def _genome_shape() -> ModelConfig:
    return ModelConfig(vocab_size=64, hidden_size=512, num_layers=8, num_heads=8, num_kv_heads=4, num_experts=8,
                       top_k=2, ffn_hidden_size=1024)


def test_a_training_step_beyond_the_hosts_memory_stops_naming_batch_size(monkeypatch) -> None:
    """configs/genome.yaml's shape at 64 x 1,024 tokens was killed by the OOM killer on a 24 GB CPU
    machine; at half the batch it ran. Refused at 24 GB, run at 64 GB and at half the batch."""
    model = SimpleNamespace(config=_genome_shape(), runtime=SimpleNamespace(activation_checkpointing=False))
    trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cpu")), world_size=1,
                              precision="bf16-mixed")
    monkeypatch.setattr(memory_check, "host_memory_bytes", lambda: 24 * 10**9)
    with pytest.raises(ConfigError, match=r"^data.batch_size=64 x data.seq_length=1024: one training step needs at "
                                          r"least \d+ GB, more than the 24 GB of this machine"):
        memory_check.check_training_memory(model, SimpleNamespace(batch_size=64, seq_length=1024), trainer)
    memory_check.check_training_memory(model, SimpleNamespace(batch_size=32, seq_length=1024), trainer)
    monkeypatch.setattr(memory_check, "host_memory_bytes", lambda: 64 * 10**9)
    memory_check.check_training_memory(model, SimpleNamespace(batch_size=64, seq_length=1024), trainer)


def test_the_parameter_count_matches_a_built_model() -> None:
    from biomoe.model.transformer import MoETransformer

    config = ModelConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4,
                         top_k=2, ffn_hidden_size=32)
    built = sum(p.numel() for p in MoETransformer(config).parameters())
    assert 0.95 * built <= memory_check.total_parameters(config) <= built  # norms left out


def test_the_resume_command_replaces_ckpt_path(monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", ["cli.py"])
    command = resume_command(["fit", "--config", "my run.yaml", "--ckpt_path", "last"], "runs/x/last.ckpt")
    assert command == "python cli.py fit --config 'my run.yaml' --ckpt_path runs/x/last.ckpt"


def test_a_resumed_progress_line_counts_towards_the_same_total() -> None:
    lines = ProgressLines(interval_s=0)
    trainer = SimpleNamespace(global_step=100, max_steps=200, world_size=1)
    lines.on_train_start(trainer, None)
    lines._started -= 10.0  # ten seconds for the ten steps since the restart
    trainer.global_step = 110
    line = lines.line(trainer, None, lines._started + 10.0)
    assert line.startswith("fit: step 110/200 (55%)") and "~1:30 left" in line
    trainer.max_steps = 29  # a total already passed is not shown as 110/29
    assert lines.line(trainer, None, lines._started + 10.0).startswith("fit: step 110,")


def test_the_model_summary_has_no_flops_line(capsys) -> None:
    columns = [(" ", ["0"]), ("Name", ["model"]), ("Params", ["35 K"]), ("FLOPs", ["0"])]
    trainer_setup.ParameterSummary.summarize(columns, 35_000, 35_000, 0.14, {"train": 3, "eval": 0}, 0)
    out = capsys.readouterr().out
    assert "model" in out and "FLOPs" not in out


def _fit(root: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "cli.py"), "fit", "--config", str(ROOT / "configs/tiny.yaml"),
               "--data.fasta", str(LAMBDA), "--data.cache_dir", str(root.parent / "cache"),
               "--data.max_train_windows", "32", "--trainer.limit_val_batches", "1", "--trainer.val_check_interval",
               "3", "--trainer.log_every_n_steps", "1", "--trainer.enable_model_summary", "false",
               "--trainer.default_root_dir", str(root), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=root.parent,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "tests")})


@pytest.mark.slow
def test_one_run_in_the_folder_given_resumed_only_by_itself(tmp_path: Path) -> None:
    run = tmp_path / "x"
    first = _fit(run, "--trainer.max_steps", "3")
    assert first.returncode == 0, first.stderr[-2000:]
    assert not (tmp_path / "runs").exists()  # the recipe's own folder is not used
    last = run / "version_0" / "checkpoints" / "last.ckpt"
    assert last.is_file() and (run / "version_0" / "config.yaml").is_file()
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}

    other = _fit(run, "--trainer.max_steps", "6", "--trainer.precision", "bf16-true", "--ckpt_path", "last")
    assert other.returncode != 0 and "Traceback" not in other.stderr
    errors = [line for line in other.stderr.splitlines() if line.startswith("biomoe: error:")]
    assert len(errors) == 1 and "another run's (trainer.precision: 'bf16-true' here, '32-true'" in errors[0]

    failed = _fit(run, "--model.runtime.precision", "mxfp8")  # a GPU precision on the CPU
    assert failed.returncode != 0
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in run.iterdir()) == ["version_0"]  # no empty version folder left

    resumed = _fit(run, "--trainer.max_steps", "6", "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"using {last}" in resumed.stderr and "site-packages" not in resumed.stderr
    assert "resumed:" in resumed.stdout and "validation bits/base: best" in resumed.stdout
    series = torch.load(run / "version_1" / "checkpoints" / "last.ckpt", weights_only=True)["callbacks"]["RunRecord"]
    validated = [step for step, _ in series["series"]["val/bits_per_base"]]
    assert validated == [2, 5]  # one before the restart, one after: one record of the run
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p in before} == before


@pytest.mark.slow
def test_a_second_run_never_rewrites_an_earlier_runs_config(tmp_path: Path) -> None:
    run = tmp_path / "x"
    assert _fit(run, "--trainer.max_steps", "2", "--trainer.logger", "false").returncode == 0
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    second = _fit(run, "--trainer.max_steps", "3", "--trainer.logger", "false", "--model.optim.lr", "1e-3")
    assert second.returncode != 0 and "Traceback" not in second.stderr
    assert "holds an earlier run (its config.yaml)" in second.stderr.strip().splitlines()[-1]
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_ctrl_c_before_any_checkpoint_saves_the_step_it_landed_in(tmp_path: Path) -> None:
    stopped = _fit(tmp_path / "x", "--trainer.max_steps", "20", "--trainer.callbacks+", "helpers.signals.SignalAtStep",
                   "--trainer.callbacks.step", "2", "--trainer.callbacks.signum", "SIGINT")
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    last = stopped.stderr.strip().splitlines()[-1]
    assert last.startswith("biomoe: interrupted (Ctrl-C) at step 2; saved: "), last
    assert "last.ckpt (step 2); resume with: " in last
