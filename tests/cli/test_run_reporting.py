"""What a run reports and where its settings come from: checkpoints carry their data, the test split
and per-genome numbers through the CLI, the summary and plot with any logger, quiet start-up."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from biomoe.cli.main import main
from conftest import ROOT, random_dna

TINY = str(ROOT / "configs/tiny.yaml")


def csv_values(folder: Path, key: str) -> list[float]:
    values = []
    for metrics in sorted(folder.rglob("metrics.csv")):
        with open(metrics) as handle:
            values += [float(row[key]) for row in csv.DictReader(handle) if row.get(key)]
    return values


def fit_args(out: Path, *extra: str) -> list[str]:
    return ["fit", "--config", TINY, "--trainer.max_steps", "6", "--trainer.val_check_interval", "6",
            "--trainer.default_root_dir", str(out), "--trainer.logger.init_args.save_dir", str(out), *extra]


@pytest.fixture(scope="module")
def three_strains(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("strains")
    paths = []
    for i, name in enumerate(("a", "b", "c")):
        path = folder / f"{name}.fa"
        path.write_text(f">contig_1\n{random_dna(6000, 10 + i)}\n")  # the same contig name in every file
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def fitted_on_strains(three_strains, tmp_path_factory):
    """fit on a, with b and c held out whole as test strains; the command line only says so."""
    out = tmp_path_factory.mktemp("fit")
    code = main(fit_args(out, "--data.fasta", "[" + ", ".join(map(str, three_strains)) + "]",
                         "--data.test_files", "[b, c]", "--data.val_fraction", "0.2"))
    assert code == 0
    return out, next(out.rglob("last.ckpt"))


def test_validate_scores_the_checkpoints_data_without_repeating_it(fitted_on_strains, tmp_path, capsys):
    out, ckpt = fitted_on_strains
    capsys.readouterr()
    code = main(["validate", "--config", TINY, "--ckpt_path", str(ckpt), "--trainer.default_root_dir", str(tmp_path),
                 "--trainer.logger.init_args.save_dir", str(tmp_path)])
    assert code == 0
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if "checkpoint's data settings" in line)
    assert "data.fasta=" in line and "a.fa" in line
    assert "data.test_files=b, c" in line and "data.val_fraction=0.2" in line
    assert csv_values(tmp_path, "val/bits_per_base") == pytest.approx(csv_values(out, "val/bits_per_base")[-1:],
                                                                      rel=1e-5)


def test_command_line_data_settings_win_over_the_checkpoints(fitted_on_strains, three_strains, tmp_path, capsys):
    _, ckpt = fitted_on_strains
    capsys.readouterr()
    code = main(["validate", "--config", TINY, "--ckpt_path", str(ckpt), "--trainer.default_root_dir", str(tmp_path),
                 "--trainer.logger.init_args.save_dir", str(tmp_path), "--data.fasta", str(three_strains[1]),
                 "--data.test_files", "null", "--data.val_fraction", "0.5"])
    assert code == 0
    assert "checkpoint's data settings" not in capsys.readouterr().err
    own = csv_values(tmp_path, "val/bits_per_base")
    assert len(own) == 1 and own[0] != pytest.approx(csv_values(fitted_on_strains[0], "val/bits_per_base")[-1])


def test_test_scores_the_held_out_strains_per_genome(fitted_on_strains, tmp_path, capsys):
    """Given the run folder, test picks its checkpoint and scores the strains held out whole."""
    out, ckpt = fitted_on_strains
    capsys.readouterr()
    code = main(["test", "--config", TINY, "--ckpt_path", str(out), "--trainer.default_root_dir", str(tmp_path),
                 "--trainer.logger.init_args.save_dir", str(tmp_path), "--trainer.limit_test_batches", "1.0"])
    assert code == 0
    assert f"using {ckpt} (no best checkpoint recorded; the last one)" in capsys.readouterr().err
    b, c = csv_values(tmp_path, "test/b/bits_per_base"), csv_values(tmp_path, "test/c/bits_per_base")
    pooled = csv_values(tmp_path, "test/bits_per_base")
    assert len(b) == len(c) == len(pooled) == 1
    assert min(b[0], c[0]) <= pooled[0] <= max(b[0], c[0])  # equal windows per strain: the mean of the two
    assert pooled[0] == pytest.approx((b[0] + c[0]) / 2, rel=1e-3)
    assert not csv_values(tmp_path, "test/a/bits_per_base")  # the training strain is not in the test split


@pytest.mark.slow
def test_fit_summary_and_plot_with_tensorboard(tmp_path, capsys, caplog):
    pytest.importorskip("tensorboard")
    caplog.set_level("INFO")
    code = main(["fit", "--config", TINY, "--trainer.max_steps", "6", "--trainer.val_check_interval", "3",
                 "--trainer.default_root_dir", str(tmp_path),
                 "--trainer.logger", "lightning.pytorch.loggers.TensorBoardLogger",
                 "--trainer.logger.init_args.save_dir", str(tmp_path), "--trainer.logger.init_args.name", "tb"])
    assert code == 0
    out = capsys.readouterr()
    assert list(tmp_path.rglob("events.out.tfevents.*"))
    assert not list(tmp_path.rglob("metrics.csv"))
    plot = next(line for line in out.out.splitlines() if line.startswith("plot:")).split(maxsplit=1)[1]
    assert Path(plot).stat().st_size > 0 and Path(plot).parent.name.startswith("version_")
    line = next(line for line in out.out.splitlines() if line.startswith("validation bits/base:"))
    assert line.startswith("validation bits/base: best ") and "(after 6 steps)" in line
    assert "order-6 Markov baseline" in line and ("below it)" in line or "above it)" in line)
    lightning_said = [record.getMessage() for record in caplog.records if record.name.startswith("lightning")]
    assert any("GPU available" in message for message in lightning_said)
    assert not any("litlogger" in message for message in lightning_said)  # its tip is silenced


def test_missing_tensorboard_is_one_line_naming_the_extra(tmp_path, capsys, monkeypatch):
    from biomoe.cli.run import trainer_setup

    monkeypatch.setattr(trainer_setup, "package_installed", lambda name: False)
    code = main(["fit", "--config", TINY, "--trainer.default_root_dir", str(tmp_path),
                 "--trainer.logger", "lightning.pytorch.loggers.TensorBoardLogger",
                 "--trainer.logger.init_args.save_dir", str(tmp_path)])
    assert code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err[-1] == ("biomoe: error: trainer.logger: TensorBoardLogger needs the tensorboard package, which is not "
                       "installed; pip install 'biomoe[tensorboard]'")
    assert not any("Traceback" in line for line in err)


def test_step_based_progress_bar_shows_no_negative_epoch_total():
    from types import SimpleNamespace

    from lightning.pytorch.callbacks import RichProgressBar

    from biomoe.cli.run.trainer_setup import StepProgressBar, install_progress_bar

    bar = StepProgressBar()
    bar._trainer = SimpleNamespace(max_epochs=-1)
    assert bar._get_train_description(0).strip() == "Epoch 0"
    bar._trainer = SimpleNamespace(max_epochs=3)
    assert bar._get_train_description(1).strip() == "Epoch 1/2"
    default, chosen = RichProgressBar(), RichProgressBar()
    trainer = SimpleNamespace(callbacks=[default])
    install_progress_bar(trainer, [])
    assert type(trainer.callbacks[0]) is StepProgressBar
    trainer = SimpleNamespace(callbacks=[chosen])
    install_progress_bar(trainer, [chosen])  # the user's own bar stays
    assert trainer.callbacks[0] is chosen


def test_a_resumed_step_based_epoch_counts_its_earlier_batches_in_the_bar_total():
    from types import SimpleNamespace

    from biomoe.cli.run.trainer_setup import StepProgressBar

    def trainer(global_step: int, done: int, max_steps: int = 110, batches: int = 600):
        progress = SimpleNamespace(current=SimpleNamespace(ready=done))
        return SimpleNamespace(max_epochs=-1, max_steps=max_steps, global_step=global_step,
                               num_training_batches=batches,
                               fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace(batch_progress=progress)))

    bar = StepProgressBar()
    bar._trainer = trainer(0, 0, max_steps=100)
    assert bar.total_train_batches == 100
    bar._trainer = trainer(100, 100)  # resumed at batch 100 of a 110-step run: 110, not the 10 left
    assert bar.total_train_batches == 110
    bar._trainer = trainer(100, 100, max_steps=10_000)  # the epoch ends first
    assert bar.total_train_batches == 600


def test_fit_through_the_cli_gets_the_step_based_progress_bar(tmp_path, monkeypatch):
    """The Trainer appends its default bar to the configured callback list itself: the CLI must
    still tell the user's callbacks from Lightning's and swap the default bar."""
    from biomoe.cli.run import trainer_setup

    seen = []
    install = trainer_setup.install_progress_bar

    def spy(trainer, configured):
        install(trainer, configured)
        seen.append(type(trainer.progress_bar_callback).__name__)

    monkeypatch.setattr(trainer_setup, "install_progress_bar", spy)
    assert main(fit_args(tmp_path, "--trainer.enable_progress_bar", "true", "--trainer.max_steps", "1")) == 0
    assert seen == ["StepProgressBar"]


def test_tf32_is_set_only_on_gpus_with_tensor_cores(monkeypatch):
    from biomoe.cli.run.trainer_setup import set_matmul_precision

    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 0))
        assert set_matmul_precision("gpu") is None and torch.get_float32_matmul_precision() == "highest"
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
        assert set_matmul_precision("cpu") is None
        assert set_matmul_precision("auto") == "high" and torch.get_float32_matmul_precision() == "high"
        torch.set_float32_matmul_precision("medium")  # the user's own choice is kept
        assert set_matmul_precision("gpu") is None and torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(before)


def test_kernels_line_names_the_precision_that_computes():
    from biomoe.backends.select import select_backends
    from biomoe.model.config import ModelConfig, RuntimeConfig

    selection = select_backends(ModelConfig(), RuntimeConfig(), torch.device("cpu"))
    assert "precision=fp32 (trainer.precision=32-true; no TE recipe)" in selection.summary("32-true")
    assert "precision=bf16 autocast, fp32 weights" in selection.summary("bf16-mixed")


def test_other_fasta_on_the_command_line_drops_the_checkpoints_file_names():
    """Scoring a held-out strain alone (--data.fasta strain.fa) must not inherit test_files that name
    the pretraining collection's files; the split fractions still come from the checkpoint."""
    from biomoe.cli.checkpoint_data import data_keys_on_command_line, settings_to_apply

    saved = {"fasta": ["a.fa", "b.fa"], "test_files": ["b"], "val_fraction": 0.05, "batch_size": 64,
             "sampling_temperature": 2.0}
    current = {"fasta": "x.fa", "test_files": None, "val_fraction": 0.1, "batch_size": 8,
               "sampling_temperature": 1.0}
    given = data_keys_on_command_line(["--data.fasta", "strain.fa", "--trainer.devices", "1"])
    assert settings_to_apply(saved, current, given) == {"val_fraction": 0.05, "sampling_temperature": 2.0}
    assert settings_to_apply(saved, current, set()) == {"fasta": ["a.fa", "b.fa"], "test_files": ["b"],
                                                        "val_fraction": 0.05, "sampling_temperature": 2.0}
    assert settings_to_apply(saved, current, data_keys_on_command_line(["--data", "d.yaml"])) == {}
    assert data_keys_on_command_line(["--data.val_contigs+=chr2", "--data.file_weights.a=2"]) == {"val_contigs",
                                                                                                 "file_weights"}


def test_a_genome_too_short_to_validate_on_says_so_at_start_up(tmp_path, capsys):
    """A 100-base genome holds out its last 10 bases at val_fraction 0.1, less than one window of
    seq_length 128: the run trains and its validation means next to nothing, which it says once."""
    fasta = tmp_path / "short.fa"
    fasta.write_text(f">short\n{random_dna(100, 7)}\n")
    code = main(["fit", "--config", TINY, "--data.fasta", str(fasta), "--data.cache_dir", str(tmp_path / "cache"),
                 "--trainer.max_steps", "1", "--trainer.default_root_dir", str(tmp_path / "run"),
                 "--trainer.logger", "false"])
    assert code == 0
    err = capsys.readouterr().err.splitlines()
    notes = [line for line in err if line.startswith("biomoe: note:") and "validation" in line]
    assert len(notes) == 1, err
    assert notes[0].startswith("biomoe: note: this run's validation is only 10 bases")
    assert "the genome is 100 bases, too short to hold out a validation window of 128 bases at data.val_fraction 0.1" \
        in notes[0]


def test_the_validation_note_says_when_nothing_is_held_out_and_is_quiet_otherwise():
    from types import SimpleNamespace

    from biomoe.cli.run.validation_note import validation_note

    def datamodule(val, rows, val_fraction=0.1, **config):
        settings = {"seq_length": 128, "val_fraction": val_fraction, "val_files": None, "val_contigs": None, **config}
        return SimpleNamespace(splits=SimpleNamespace(train=[(0, 0, 90)], val=val, test=[]), val_dataset=rows,
                               config=SimpleNamespace(**settings), has_val_split=bool(val_fraction))

    none = validation_note(datamodule([], None))
    assert none.startswith("biomoe: note: this run has no validation: the genome is 90 bases, too short")
    short = validation_note(datamodule([(1, 0, 50)], [0], val_files=["b"]))
    assert short.startswith("biomoe: note: this run's validation is only 50 bases") and "data.val_files hold" in short
    assert validation_note(datamodule([(1, 0, 500)], [0], val_files=["b"])) is None  # at least one window
    assert validation_note(datamodule([(0, 1800, 2000)], [0, 1])) is None
    assert validation_note(datamodule([], None, val_fraction=0.0)) is None  # turned off by the user


def test_the_bar_shows_short_metrics_that_fit_an_80_column_terminal():
    """The stock items (``v_num: 0``, ``train/tokens_per_s: 1332.971``, ``loss: 1.377``) wrapped the
    metrics column over four lines in an 80-column terminal."""
    from types import SimpleNamespace

    from biomoe.cli.run.trainer_setup import StepProgressBar

    metrics = {"train/tokens_per_s": 1332.971, "loss": 1.37712, "val/ce": 1.358, "val/bits_per_base": 1.95912}
    trainer = SimpleNamespace(progress_bar_metrics=metrics, loggers=[SimpleNamespace(version=0)],
                              logger=SimpleNamespace(version=0))
    items = StepProgressBar().get_metrics(trainer, SimpleNamespace())
    assert items == {"tok/s": "1,333", "loss": "1.377", "val bits/base": "1.959"}
    assert len("  ".join(f"{k}: {v}" for k, v in items.items())) < 50
