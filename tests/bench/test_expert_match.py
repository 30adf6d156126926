"""``python -m bench.experts match``: loss curves of the same fit on other expert kernels."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from bench.expert_match import NOISE_FACTOR, deviation, fit_args, summarise
from bench.experts import main


def _write_run(folder: Path, losses: dict[int, float]) -> None:
    (folder / "version_0").mkdir(parents=True)
    with (folder / "version_0" / "metrics.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", "train/loss", "train/tokens_per_s"])
        for step, loss in losses.items():
            writer.writerow([step, loss, 1000.0])
            writer.writerow([step, "", 1000.0])  # other metrics logged on their own rows


def test_deviation_compares_only_steps_both_logged_and_the_last_tenth_apart() -> None:
    reference = {s: 3.0 - s / 100 for s in range(0, 100, 10)}
    curve = {s: v + (0.2 if s == 90 else 0.01) for s, v in reference.items()} | {95: 9.9}
    gaps = deviation(curve, reference)
    assert gaps["steps_compared"] == 10
    assert gaps["max_abs"] == pytest.approx(0.2)
    assert gaps["last_tenth_mean_abs"] == pytest.approx(0.2)
    assert gaps["mean_abs"] == pytest.approx((9 * 0.01 + 0.2) / 10)


def test_a_backend_matches_only_within_the_yardstick_of_two_bf16_runs() -> None:
    steps = range(0, 200, 10)
    reference = {s: 3.0 - s / 1000 for s in steps}
    eager = {s: v + 0.010 for s, v in reference.items()}
    close = {s: v - 0.012 for s, v in reference.items()}
    drifting = {s: v + 0.010 + s / 2000 for s, v in reference.items()}  # a real fault grows with the steps
    out = summarise({"torch": reference, "quack": close, "bad": drifting, "torch-eager": eager},
                    "torch", "torch-eager")
    assert out["quack"]["within_noise"] is True
    assert out["bad"]["within_noise"] is False
    assert "within_noise" not in out["torch-eager"] and "torch" not in out
    assert 0.012 <= NOISE_FACTOR * 0.010


def test_eager_suffix_turns_compile_off_and_unknown_kernels_are_one_line() -> None:
    assert fit_args("quack")[-2:] == ["--model.runtime.expert_backend", "quack"]
    assert fit_args("torch-eager")[-2:] == ["--model.runtime.compile", "false"]
    with pytest.raises(SystemExit, match="unknown kernels 'cuda'"):
        fit_args("cuda")


def test_report_only_writes_the_table_picture_and_file_from_existing_runs(tmp_path: Path) -> None:
    runs, out = tmp_path / "runs", tmp_path / "out"
    base = {s: 2.0 - s / 1000 for s in range(10, 110, 10)}
    _write_run(runs / "torch", base)
    _write_run(runs / "quack", {s: v + 0.001 for s, v in base.items()})
    _write_run(runs / "torch-eager", {s: v - 0.002 for s, v in base.items()})
    assert main(["match", "--data", "unused.fa", "--runs", str(runs), "--out", str(out), "--report-only",
                 "--steps", "100", "--machine", "test GPU"]) == 0
    result = json.loads((out / "match.json").read_text())
    assert result["reference"] == "torch" and result["noise"] == "torch-eager"
    assert result["deviations"]["quack"]["within_noise"] is True
    assert result["contenders"]["quack"]["steps"] == sorted(base)
    text = (out / "match.md").read_text()
    assert "| quack | 1.9010 |" in text and "test GPU" in text
    pytest.importorskip("matplotlib")
    assert (out / "match.png").stat().st_size > 0


def test_a_reference_without_a_curve_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="the reference run logged no loss"):
        main(["match", "--data", "unused.fa", "--runs", str(tmp_path), "--out", str(tmp_path / "out"),
              "--report-only"])
