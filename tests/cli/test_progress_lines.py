"""fit without a progress bar still says how it is going, at most every interval."""

from __future__ import annotations

import io
import time
from types import SimpleNamespace

import torch

from biomoe.cli.run.progress_lines import ProgressLines, format_duration


def fake_trainer(step: int, bar=None):
    return SimpleNamespace(global_step=step, max_steps=100, world_size=1, is_global_zero=True,
                           progress_bar_callback=bar)


def test_a_line_per_interval_with_step_loss_rate_and_time_left(monkeypatch):
    clock = iter([0.0, 1.0, 2.0, 11.0, 12.0, 25.0])
    monkeypatch.setattr("biomoe.cli.run.progress_lines.time.perf_counter", lambda: next(clock))
    out = io.StringIO()
    callback = ProgressLines(interval_s=10, stream=out)
    batch = {"input_ids": torch.zeros(4, 8, dtype=torch.long)}
    callback.on_train_start(fake_trainer(0), None)
    for step in range(1, 6):
        callback.on_train_batch_end(fake_trainer(step * 10), None, {"loss": torch.tensor(1.5)}, batch, step)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2  # at 11 s and at 25 s, not at every step
    assert lines[0].startswith("fit: step 30/100 (30%), loss 1.5000,") and "tokens/s" in lines[0]
    assert "0:11 elapsed, ~0:26 left" in lines[0]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def run_one_interval(monkeypatch, out, bar) -> str:
    clock = iter([0.0, 100.0])
    monkeypatch.setattr("biomoe.cli.run.progress_lines.time.perf_counter", lambda: next(clock))
    callback = ProgressLines(interval_s=1, stream=out)
    callback.on_train_start(fake_trainer(0, bar=bar), None)
    callback.on_train_batch_end(fake_trainer(1, bar=bar), None, {"loss": torch.tensor(1.0)}, {}, 0)
    return out.getvalue()


def test_silent_when_a_progress_bar_draws_on_a_terminal(monkeypatch):
    assert run_one_interval(monkeypatch, Terminal(), bar=object()) == ""


def test_lines_when_the_bar_draws_into_a_file(monkeypatch):
    # `fit > log`: the bar's carriage returns never end a line there, so the log would stay empty
    assert run_one_interval(monkeypatch, io.StringIO(), bar=object()).startswith("fit: step 1/100")


def test_durations_read_as_clock_time():
    assert format_duration(59.6) == "1:00" and format_duration(3725) == "1:02:05"


def test_a_step_that_runs_long_says_so_while_it_runs(monkeypatch):
    # a GPU recipe's first step on a CPU took 11 minutes with nothing printed: lines come while it runs
    clock = iter([0.0, 1.0, 12.0, 25.0])
    monkeypatch.setattr("biomoe.cli.run.progress_lines.time.perf_counter", lambda: next(clock))
    callback = ProgressLines(interval_s=10, stream=io.StringIO())
    callback.on_train_start(fake_trainer(0), None)  # 0 s
    callback.on_train_batch_start(fake_trainer(0), None, {}, 0)  # step 1 starts at 1 s
    assert callback.waiting_line(5.0) is None  # not yet due
    assert callback.waiting_line(12.0) == "fit: step 1/100 running, 0:11 so far, 0:12 elapsed"


def test_a_step_that_has_only_just_started_waits_for_its_own_line(monkeypatch):
    # fast steps: the line due now comes from the step's end (loss, tokens/s), not "running, 0:00 so far"
    clock = iter([0.0, 10.5])
    monkeypatch.setattr("biomoe.cli.run.progress_lines.time.perf_counter", lambda: next(clock))
    callback = ProgressLines(interval_s=10, stream=io.StringIO())
    callback.on_train_start(fake_trainer(0), None)  # last line at 0 s
    callback.on_train_batch_start(fake_trainer(0), None, {}, 0)  # step 1 starts at 10.5 s
    assert callback.waiting_line(10.6) is None
    assert callback.waiting_line(15.6) == "fit: step 1/100 running, 0:05 so far, 0:16 elapsed"


def test_a_long_validation_counts_its_batches():
    callback = ProgressLines(interval_s=10, stream=io.StringIO())
    trainer = SimpleNamespace(**vars(fake_trainer(5)), sanity_checking=False, num_val_batches=[40])
    callback._last = 0.0
    callback.on_validation_start(trainer, None)
    for index in range(2):
        callback.on_validation_batch_end(trainer, None, None, {}, index)
    line = callback.waiting_line(callback._phase_since + 30)
    assert line.startswith("fit: validation after step 5, batch 3/40 running, 0:30 so far")
    callback.on_validation_end(trainer, None)
    assert callback.waiting_line(callback._phase_since + 30) is None  # nothing running that is worth a line


def test_the_lines_come_from_a_thread_that_ends_with_the_run():
    out = io.StringIO()
    callback = ProgressLines(interval_s=0.05, stream=out)
    callback.on_fit_start(fake_trainer(0), None)
    callback.on_train_start(fake_trainer(0), None)
    callback.on_train_batch_start(fake_trainer(0), None, {}, 0)
    deadline = time.monotonic() + 5
    while "fit: step 1/100 running" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.02)
    callback.on_fit_end(fake_trainer(0), None)
    assert "fit: step 1/100 running" in out.getvalue()
    assert callback._thread is None
    printed = out.getvalue()
    time.sleep(0.2)
    assert out.getvalue() == printed  # nothing after the run ended
