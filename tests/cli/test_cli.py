"""End to end through the LightningCLI: fit lowers the loss, writes a checkpoint; validate reproduces."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import ROOT


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def read_series(csv_path: Path, key: str) -> list[float]:
    with open(csv_path) as handle:
        return [float(row[key]) for row in csv.DictReader(handle) if row.get(key)]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    out = tmp_path_factory.mktemp("fit")
    result = run_cli("fit", "--config", str(ROOT / "configs/tiny.yaml"),
                     "--trainer.default_root_dir", str(out),
                     "--trainer.logger.init_args.save_dir", str(out),
                     "--data.fasta", str(ROOT / "data/lambda_virus.fa.gz"))
    assert result.returncode == 0, result.stderr[-3000:]
    return out, result


@pytest.mark.slow
def test_fit_lowers_loss_and_writes_checkpoint(fitted):
    out, result = fitted
    metrics = next(out.rglob("metrics.csv"))
    losses = read_series(metrics, "train/loss")
    assert len(losses) >= 4
    assert sum(losses[-2:]) / 2 < losses[0] - 0.1, losses
    ckpt = next(out.rglob("last.ckpt"))
    assert ckpt.stat().st_size > 0
    assert "checkpoint:" in result.stdout and "validation bits/base" in result.stdout
    assert read_series(metrics, "val/bits_per_base")


@pytest.mark.slow
def test_validate_reproduces_validation_loss(fitted):
    out, _ = fitted
    metrics = next(out.rglob("metrics.csv"))
    fit_val = read_series(metrics, "val/ce")[-1]
    ckpt = next(out.rglob("last.ckpt"))
    result = run_cli("validate", "--config", str(ROOT / "configs/tiny.yaml"), "--ckpt_path", str(ckpt),
                     "--trainer.default_root_dir", str(out / "val"),
                     "--trainer.logger.init_args.save_dir", str(out / "val"),
                     "--data.fasta", str(ROOT / "data/lambda_virus.fa.gz"))
    assert result.returncode == 0, result.stderr[-3000:]
    val_metrics = next((out / "val").rglob("metrics.csv"))
    assert read_series(val_metrics, "val/ce")[-1] == pytest.approx(fit_val, rel=1e-5)


@pytest.mark.slow
def test_print_config_works():
    result = run_cli("fit", "--config", str(ROOT / "configs/tiny.yaml"), "--print_config")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "expert_backend" in result.stdout and "seq_length" in result.stdout


@pytest.mark.slow
def test_every_shipped_config_parses():
    """Each configs/*.yaml still matches the CLI's signatures (a renamed argument breaks a config
    nobody runs on CPU). One process checks them all; --print_config validates without building."""
    script = (
        "import sys, contextlib, io\n"
        "from biomoe.cli.main import main\n"
        "bad = []\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        with contextlib.redirect_stdout(io.StringIO()):\n"
        "            code = main(['fit', '--config', path, '--print_config'])\n"
        "    except SystemExit as exit:\n"
        "        code = exit.code\n"
        "    if code not in (0, None): bad.append(path)\n"
        "print('BAD', bad)\n")
    configs = sorted(str(p) for p in (ROOT / "configs").glob("*.yaml"))
    assert len(configs) >= 5
    result = subprocess.run([sys.executable, "-c", script, *configs], cwd=ROOT, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0 and "BAD []" in result.stdout, (result.stdout[-2000:], result.stderr[-3000:])


def test_fused_adamw_with_bf16_and_gradient_clipping(tmp_path, monkeypatch):
    """Lightning's AMP plugin refuses to clip for fused optimizers; our module clips itself (GPU default):
    every update the optimizer applies is of gradients whose norm is at most the clip value."""
    from biomoe.cli.main import main

    max_norm, raw, applied = 0.05, [], []
    original = torch.optim.AdamW.step

    def recording_step(self, closure=None):
        loss = None
        if closure is not None:  # Lightning's closure: forward, backward, then the clipping
            with torch.enable_grad():
                loss = closure()
        grads = [p.grad.float() for group in self.param_groups for p in group["params"] if p.grad is not None]
        norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
        scale = getattr(self, "grad_scale", None)  # a fused kernel divides the gradients by it
        raw.append(norm)
        applied.append(norm / float(scale) if scale is not None else norm)
        original(self)
        return loss

    monkeypatch.setattr(torch.optim.AdamW, "step", recording_step)
    code = main(["fit", "--config", str(ROOT / "configs/tiny.yaml"), "--model.optim.fused", "true",
                 "--trainer.precision", "bf16-mixed", "--trainer.max_steps", "3",
                 "--trainer.gradient_clip_val", str(max_norm),
                 "--trainer.default_root_dir", str(tmp_path), "--trainer.logger.init_args.save_dir", str(tmp_path),
                 "--data.fasta", str(ROOT / "data/lambda_virus.fa.gz")])
    assert code == 0
    assert next(tmp_path.rglob("last.ckpt")).exists()
    assert len(applied) == 3 and min(raw) > max_norm, raw  # every step had something to clip
    assert all(norm <= max_norm * (1 + 1e-3) for norm in applied), (raw, applied)


@pytest.mark.slow
def test_predict_writes_scores_consistent_with_validation(fitted):
    """``predict`` scores the held-out windows; its per-base mean over the batches validation saw
    equals validation's cross-entropy (same model, same positions, independent code path)."""
    import math

    import numpy as np

    out, _ = fitted
    ckpt = next(out.rglob("last.ckpt"))
    predict = ("predict", "--config", str(ROOT / "configs/tiny.yaml"), "--ckpt_path", str(ckpt),
               "--trainer.default_root_dir", str(out / "pred"),
               "--trainer.logger.init_args.save_dir", str(out / "pred"),
               "--data.fasta", str(ROOT / "data/lambda_virus.fa.gz"))
    result = run_cli(*predict)
    assert result.returncode == 0, result.stderr[-3000:]
    (folder,) = [p.parent for p in (out / "pred").rglob("window_scores.tsv")]
    assert folder.name == "predictions" and folder.parent.name.startswith("version_")
    with open(folder / "window_scores.tsv") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    assert len(rows) >= 8 and all(r["contig"].startswith("gi|") for r in rows)
    starts = [int(r["start"]) for r in rows]
    assert starts == sorted(starts) and int(rows[0]["start"]) >= int(48502 * 0.9)
    per_base = np.load(folder / "per_base_loglik.npz")
    assert list(per_base["window"]) == [int(r["window"]) for r in rows]
    # one line per packed document: 128-base pieces, and the contig's end as a shorter one
    assert list(per_base["length"]) == [int(r["end"]) - int(r["start"]) for r in rows]
    assert set(per_base["length"][:-1]) == {128} and 0 < per_base["length"][-1] <= 128
    first = per_base["log_likelihood"][:128]
    assert float(np.nansum(first)) == pytest.approx(float(rows[0]["log_likelihood"]), abs=1e-3)
    assert list(per_base["contig_names"]) == [rows[0]["contig"]]
    seen = rows[: 4 * 8]  # tiny.yaml validates limit_val_batches=4 batches of 8 windows
    nats = -sum(float(r["log_likelihood"]) for r in seen) / sum(int(r["scored_bases"]) for r in seen)
    val_ce = read_series(next(out.rglob("metrics.csv")), "val/ce")[-1]
    assert nats == pytest.approx(val_ce, rel=1e-4)
    assert float(rows[0]["bits_per_base"]) == pytest.approx(
        -float(rows[0]["log_likelihood"]) / int(rows[0]["scored_bases"]) / math.log(2), rel=1e-4)
    again = run_cli(*predict)  # a second predict keeps the first one's results
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(list((out / "pred").rglob("window_scores.tsv"))) == 2


def _printed_metric(stdout: str, name: str) -> float:
    """A metric from the table Lightning prints at the end of validate/test."""
    import re

    match = re.search(re.escape(name) + r"\s*[│|]\s*([0-9.]+)", stdout)
    assert match, stdout[-3000:]
    return float(match.group(1))


@pytest.mark.slow
def test_one_markov_baseline_per_split_in_validate_test_and_markov(fitted):
    """The order-6 baseline of the validation split reads the same in validate, in test without a
    test split (which scores validation, with validation's batch limit), and in ``markov
    --ckpt_path`` (which reads the run's split)."""
    out, _ = fitted
    ckpt = next(out.rglob("last.ckpt"))
    common = ("--config", str(ROOT / "configs/tiny.yaml"), "--ckpt_path", str(ckpt),
              "--trainer.default_root_dir", str(out / "eval"), "--trainer.logger", "false",
              "--data.fasta", str(ROOT / "data/lambda_virus.fa.gz"))
    validate = run_cli("validate", *common)  # tiny.yaml: limit_val_batches 4
    assert validate.returncode == 0, validate.stderr[-3000:]
    test = run_cli("test", *common)
    assert test.returncode == 0, test.stderr[-3000:]
    assert "testing on the validation split" in test.stderr
    for metric in ("markov_bits_per_base", "bits_per_base"):
        assert _printed_metric(test.stdout, f"test/{metric}") == pytest.approx(
            _printed_metric(validate.stdout, f"val/{metric}"), abs=1e-4)
    whole = run_cli("validate", *common, "--trainer.limit_val_batches", "1.0")
    assert whole.returncode == 0, whole.stderr[-3000:]
    markov = run_cli("markov", "--ckpt_path", str(ckpt), "--max-order", "6")
    assert markov.returncode == 0, markov.stderr[-3000:]
    order6 = float(next(line.split()[1] for line in markov.stdout.splitlines() if line.split()[:1] == ["6"]))
    assert order6 == pytest.approx(_printed_metric(whole.stdout, "val/markov_bits_per_base"), abs=1e-4)
