"""Plots are drawn from real metrics files; a run without the metric is an error, not a blank plot."""

import pytest

pytest.importorskip("matplotlib")

from biomoe.training.reports.plots import plot_validation_comparison  # noqa: E402


def write_metrics(path, values):
    rows = ["epoch,step,val/bits_per_base,train/loss"]
    rows += [f"0,{100 * (i + 1)},{v},{2 * v}" for i, v in enumerate(values)]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_comparison_plot_writes_png(tmp_path):
    a = write_metrics(tmp_path / "a.csv", [1.95, 1.90, 1.88])
    b = write_metrics(tmp_path / "b.csv", [1.96, 1.92, 1.93])
    out = plot_validation_comparison({"moe": a, "dense": b}, tmp_path / "cmp.png", {"markov": 1.937})
    assert out.exists() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_without_the_metric_is_refused(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("epoch,step,train/loss\n0,10,3.0\n")
    with pytest.raises(ValueError, match="empty.csv"):
        plot_validation_comparison({"x": empty}, tmp_path / "cmp.png")


def test_one_run_can_give_several_columns(tmp_path):
    """``label -> (csv, column)`` plots another metric of the same run (network alone and mixed);
    a column the run does not have is named in the error."""
    a = write_metrics(tmp_path / "a.csv", [1.95, 1.90, 1.88])
    out = plot_validation_comparison({"alone": a, "loss": (a, "train/loss")}, tmp_path / "two.png")
    assert out.exists()
    with pytest.raises(ValueError, match="val/repeat_mix_bits_per_base"):
        plot_validation_comparison({"mixed": (a, "val/repeat_mix_bits_per_base")}, tmp_path / "bad.png")
