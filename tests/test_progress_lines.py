"""fit without a progress bar still says how it is going, at most every interval."""

from __future__ import annotations

import io
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
