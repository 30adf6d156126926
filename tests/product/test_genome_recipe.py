"""configs/genome.yaml's checkpointing, early stopping and training length, shrunk to a CPU run.

The GPU recipe keeps the best checkpoint while an EMA of the weights is what validation scores;
Lightning's weights-only checkpoints would silently hold the raw weights instead, so the best file is
a full one less the optimizer state (only last.ckpt is resumed). Here the same callbacks run
on a tiny model, with the EMA moving fast enough to matter, on data whose held-out curve turns up.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
import yaml

from biomoe.checkpoint.run_folder import resolve_checkpoint
from biomoe.cli.main import main
from conftest import ROOT, random_dna


def shrunk_recipe(tmp_path: Path, train: Path, held_out: Path) -> Path:
    config = yaml.safe_load((ROOT / "configs/genome.yaml").read_text())
    trainer = config["trainer"]
    trainer.update(accelerator="cpu", precision="32-true", max_time=None, default_root_dir=str(tmp_path / "run"),
                   log_every_n_steps=5)
    trainer["logger"]["init_args"]["save_dir"] = str(tmp_path / "run")
    for callback in trainer["callbacks"]:
        name = callback["class_path"].rsplit(".", 1)[-1]
        if name == "EMAWeightAveraging":
            callback["init_args"].update(device="cpu", decay=0.5)
        elif name == "TrainingLength":
            callback["init_args"].update(passes=2.0, evaluations=8)
        elif name == "MarkovBaseline":
            callback["init_args"]["order"] = 2
    config["model"]["config"].update(hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, num_experts=4,
                                     ffn_hidden_size=32, dropout=0.0)
    config["model"]["optim"].update(lr=3e-3, warmup_steps=2, weight_decay=0.1)
    config["data"].update(fasta=[str(train), str(held_out)], val_files=[held_out.name], val_fraction=0.0,
                          seq_length=64, stride=None, batch_size=4, num_workers=0, mutation_prob=0.0, rc_prob=0.0)
    path = tmp_path / "genome-cpu.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def val_series(run: Path) -> list[tuple[int, float]]:
    with open(next(run.rglob("metrics.csv"))) as handle:
        return [(int(r["step"]), float(r["val/bits_per_base"]))
                for r in csv.DictReader(handle) if r.get("val/bits_per_base")]


@pytest.mark.slow
def test_recipe_keeps_the_best_ema_checkpoint_and_stops_early(tmp_path, capsys):
    # A/T-rich training, uniform held-out: validation first falls, then rises (see test_training_length).
    train, held_out = tmp_path / "train.fa", tmp_path / "unrelated.fa"
    train.write_text(">t\n" + random_dna(10_000, 7, alphabet="AAAT") + "\n")
    held_out.write_text(">u\n" + random_dna(3_000, 3) + "\n")
    assert main(["fit", "--config", str(shrunk_recipe(tmp_path, train, held_out))]) == 0
    summary = capsys.readouterr().out
    run = tmp_path / "run"
    series = val_series(run)
    best_step, best = min(series, key=lambda point: point[1])
    assert len(series) < 8  # early stopping: the curve turned up, the run ended before its 8 validations
    assert series[-1][1] > best
    files = sorted(p.name for p in run.rglob("*.ckpt"))
    assert files == ["best-step{}-val{:.4f}.ckpt".format(best_step + 1, best), "last.ckpt"], files
    chosen = Path(resolve_checkpoint(run))
    assert chosen.name.startswith("best-")
    assert f"checkpoint: {chosen} (best val/bits_per_base {best:.4f}; " in summary
    # The kept file holds the weights validation scored (the EMA average), not the raw weights.
    out = tmp_path / "validate"
    assert main(["validate", "--config", str(tmp_path / "genome-cpu.yaml"), "--ckpt_path", str(run),
                 "--trainer.default_root_dir", str(out), "--trainer.logger.init_args.save_dir", str(out)]) == 0
    assert val_series(out)[0][1] == pytest.approx(best, rel=1e-5)
    # The best file keeps everything but the optimizer state: it is read to score, last.ckpt to resume.
    state, last = torch.load(chosen, weights_only=False), torch.load(next(run.rglob("last.ckpt")), weights_only=False)
    assert not {"optimizer_states", "lr_schedulers"} & set(state) and last["optimizer_states"]
    assert {"callbacks", "loops", "hyper_parameters", "current_model_state", "averaging_state"} <= set(state)
    assert chosen.stat().st_size < 0.7 * next(run.rglob("last.ckpt")).stat().st_size
    assert "no optimizer state" in summary.split(str(chosen), 1)[1].splitlines()[0]
    capsys.readouterr()
    # Every reader takes it: test, predict, score-fasta and export-hf of the run folder.
    for command in ("test", "predict"):
        out = tmp_path / command
        assert main([command, "--config", str(tmp_path / "genome-cpu.yaml"), "--ckpt_path", str(run),
                     "--trainer.default_root_dir", str(out), "--trainer.logger.init_args.save_dir", str(out)]) == 0
    assert main(["score-fasta", str(run), str(held_out), "--out", str(tmp_path / "scores")]) == 0
    assert main(["export-hf", str(run), str(tmp_path / "hf")]) == 0
    assert (tmp_path / "hf" / "config.json").is_file() and f"{best:.4f}" in (tmp_path / "hf" / "README.md").read_text()
    # Resuming it is refused in one line that points at last.ckpt.
    capsys.readouterr()
    assert main(["fit", "--config", str(tmp_path / "genome-cpu.yaml"), "--ckpt_path", str(chosen)]) != 0
    (line,) = [line for line in capsys.readouterr().err.splitlines() if str(chosen) in line]
    assert "holds no optimizer state" in line and "last.ckpt" in line
