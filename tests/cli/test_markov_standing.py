"""A run still worse than the order-k Markov baseline says so: at every validation while it trains,
in the end-of-run summary (with the reason when ``max_time`` stopped it), and when a signal stops it."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from biomoe.cli.main import main
from biomoe.cli.run.summary import fit_summary
from biomoe.training.guards.time_limit import StopAtTimeLimit
from biomoe.training.reports.history import MetricsHistory
from biomoe.training.reports.markov_baseline import MarkovBaseline
from conftest import ROOT

LAMBDA = ROOT / "data/lambda_virus.fa.gz"


def fake_trainer(step: int, network: float | None, callbacks: list | None = None) -> SimpleNamespace:
    metrics = {} if network is None else {"val/bits_per_base": torch.tensor(network)}
    return SimpleNamespace(sanity_checking=False, state=SimpleNamespace(fn="fit"), callback_metrics=metrics,
                           global_step=step, is_global_zero=True, callbacks=callbacks or [], loggers=[],
                           checkpoint_callbacks=[], default_root_dir=".")


def baseline_at(markov: float, stream: io.StringIO) -> MarkovBaseline:
    callback = MarkovBaseline(order=6, stream=stream)
    callback.cached["val"] = markov
    return callback


def test_each_validation_behind_the_baseline_is_a_line_and_getting_below_it_is_said_once():
    stream = io.StringIO()
    callback = baseline_at(1.9551, stream)
    for step, network in ((40, 2.0103), (80, 1.9612), (120, 1.9500), (160, 1.9480)):
        callback.on_validation_end(fake_trainer(step, network), None)
    lines = stream.getvalue().splitlines()
    assert lines == [
        "fit: validation after step 40: 2.0103 bits/base, still behind the order-6 Markov baseline (1.9551) by 0.0552",
        "fit: validation after step 80: 1.9612 bits/base, still behind the order-6 Markov baseline (1.9551) by 0.0061",
        "fit: validation after step 120: 1.9500 bits/base, below the order-6 Markov baseline (1.9551) by 0.0051",
    ]


def test_validate_and_sanity_checks_say_nothing():
    stream = io.StringIO()
    callback = baseline_at(1.9551, stream)
    validating = fake_trainer(0, 2.1)
    validating.state.fn = "validate"
    callback.on_validation_end(validating, None)
    sanity = fake_trainer(0, 2.1)
    sanity.sanity_checking = True
    callback.on_validation_end(sanity, None)
    assert stream.getvalue() == "" and callback.standing is None


def test_a_run_stopped_by_a_signal_says_it_was_still_behind():
    stream = io.StringIO()
    callback = baseline_at(1.9551, stream)
    callback.on_validation_end(fake_trainer(40, 2.0103), None)
    callback.on_exception(fake_trainer(57, None), None, KeyboardInterrupt())
    assert stream.getvalue().splitlines()[-1] == (
        "fit: stopped while still behind the order-6 Markov baseline: the last validation (after step 40) scored "
        "2.0103 bits/base against its 1.9551")
    ahead = io.StringIO()
    callback = baseline_at(1.9551, ahead)
    callback.on_validation_end(fake_trainer(40, 1.9000), None)
    callback.on_exception(fake_trainer(57, None), None, KeyboardInterrupt())
    assert "stopped while" not in ahead.getvalue()


def summary_of(folder: Path, best: float, markov: float, stopped_by_time: bool) -> str:
    history = MetricsHistory()
    history.log_metrics({"val/bits_per_base": best + 0.05, "val/markov_bits_per_base": markov}, step=39)
    history.log_metrics({"val/bits_per_base": best, "val/markov_bits_per_base": markov}, step=79)
    limit = StopAtTimeLimit()
    limit.stopped_at_step = 93 if stopped_by_time else None
    trainer = fake_trainer(93, None, [MarkovBaseline(order=6), limit])
    trainer.loggers = [history]
    return fit_summary(trainer, str(folder))


def test_the_summary_of_a_run_stopped_by_max_time_says_it_is_still_behind_and_why(tmp_path):
    text = summary_of(tmp_path, 1.9612, 1.9551, stopped_by_time=True)
    line = next(line for line in text.splitlines() if line.startswith("behind:"))
    assert line.startswith("behind:     the network is still behind the order-6 Markov baseline: its best validation "
                           "(1.9612 bits/base) is 0.0061 above the baseline's 1.9551; trainer.max_time stopped it")
    assert "configs/genome-cpu.yaml" in line
    assert "trainer.max_time" not in next(line for line in summary_of(tmp_path, 1.9612, 1.9551, False).splitlines()
                                          if line.startswith("behind:"))
    assert not any(line.startswith("behind:") for line in summary_of(tmp_path, 1.9500, 1.9551, True).splitlines())


@pytest.mark.slow
def test_a_fit_behind_the_baseline_says_so_while_it_trains_and_when_max_time_ends_it(tmp_path, capsys):
    """A validation after every second step, and max_time run out after the fifth (on any machine's
    speed): the tiny network is validated twice, each time far above lambda's order-6 Markov
    baseline, then stopped by time."""
    argv = ["fit", "--config", str(ROOT / "configs/tiny.yaml"), "--data.fasta", str(LAMBDA),
            "--data.cache_dir", str(tmp_path / "cache"), "--trainer.enable_model_summary", "false",
            "--trainer.default_root_dir", str(tmp_path / "run"), "--trainer.logger.init_args.save_dir",
            str(tmp_path / "run"), "--trainer.max_steps", "1000", "--trainer.max_time", "00:01:00:00",
            "--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "1",
            "--trainer.num_sanity_val_steps", "0", "--trainer.callbacks+", "helpers.time_up.TimeUpAfter",
            "--trainer.callbacks.steps", "5"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    behind = [line for line in captured.err.splitlines() if "still behind the order-6 Markov baseline" in line]
    assert [line.split(":")[1] for line in behind] == [" validation after step 2", " validation after step 4"]
    assert ") reached after step 5 " in captured.err
    summary = next(line for line in captured.out.splitlines() if line.startswith("behind:"))
    assert "trainer.max_time stopped it" in summary


def test_the_cpu_recipe_names_the_markov_baseline_it_is_measured_against():
    import yaml

    recipe = yaml.safe_load(Path(ROOT / "configs/genome-cpu.yaml").read_text())
    names = [cb["class_path"].rsplit(".", 1)[-1] for cb in recipe["trainer"]["callbacks"]]
    assert {"MarkovBaseline", "BestCheckpoint", "TrainingLength", "CpuThreads"} <= set(names)
    assert recipe["trainer"]["max_time"] and recipe["trainer"]["accelerator"] == "auto"
