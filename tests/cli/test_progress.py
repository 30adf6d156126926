"""Long commands show progress: score-fasta on stderr, predict through Lightning's bar unless the config turns it off
(generate, embed and score-variants are checked in their own tests)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch

from biomoe.model.config import ModelConfig
from biomoe.model.transformer import MoETransformer
from biomoe.cli.arguments import base_rate
from biomoe.cli.main import main as cli_main
from biomoe.progress import FirstBatchClock
from conftest import ROOT, random_dna, save_checkpoint


def test_score_fasta_reports_bases_scored(tmp_path, write_fasta, capsys):
    cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                      ffn_hidden_size=32)
    ckpt = save_checkpoint(tmp_path / "m.ckpt", MoETransformer(cfg), cfg)
    fasta = write_fasta({"a": random_dna(700, 1), "b": random_dna(300, 2)})
    assert cli_main(["score-fasta", str(ckpt), str(fasta), "--out", str(tmp_path / "s"), "--window", "64",
                     "--batch-size", "2"]) == 0
    err = capsys.readouterr().err
    assert "score-fasta" in err and "1.00k/1.00k" in err  # every base counted once
    assert cli_main(["score-fasta", str(ckpt), str(fasta), "--out", str(tmp_path / "q"), "--no-progress"]) == 0
    assert "score-fasta" not in capsys.readouterr().err


@pytest.mark.parametrize("bar", ["false", "true"])
def test_predict_honours_the_progress_bar_setting(tmp_path, capsys, bar):
    torch.manual_seed(0)
    code = cli_main(["predict", "--config", str(ROOT / "configs/tiny.yaml"),
                     "--trainer.default_root_dir", str(tmp_path), "--trainer.logger", "false",
                     "--trainer.enable_progress_bar", bar,
                     "--data.fasta", str(ROOT / "data/lambda_virus.fa.gz"), "--data.val_fraction", "0.02"])
    assert code == 0
    captured = capsys.readouterr()
    shown = "Predicting" in captured.out + captured.err
    assert shown == (bar == "true")
    assert (tmp_path / "predictions" / "window_scores.tsv").exists()


def test_score_fasta_times_the_first_batch_apart(tiny_checkpoint, write_fasta, tmp_path, capsys):
    # ten windows of 64 bases, one per forward pass: the rate after the first batch is given apart
    fasta = write_fasta({"a": random_dna(640, 3)})
    assert cli_main(["score-fasta", str(tiny_checkpoint), str(fasta), "--out", str(tmp_path / "s"), "--window", "64",
                     "--batch-tokens", "64", "--device", "cpu", "--no-progress"]) == 0
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.fullmatch(r"scored 640 bases in \d+\.\d\d s: [\d.]+ [kM]bp/s after the first batch \(first batch 64 "
                        r"bases in \d+\.\d\d s, includes warm-up; [\d.]+ [kM]bp/s over the whole run\)", line), line


def test_score_fasta_of_one_batch_says_so(tiny_checkpoint, write_fasta, tmp_path, capsys):
    fasta = write_fasta({"a": random_dna(100, 4)})
    assert cli_main(["score-fasta", str(tiny_checkpoint), str(fasta), "--out", str(tmp_path / "s"), "--window", "64",
                     "--device", "cpu", "--no-progress"]) == 0
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.fullmatch(r"scored 100 bases in \d+\.\d\d s: [\d.]+ [kM]bp/s in one batch \(includes warm-up\)",
                        line), line


def test_first_batch_clock_reports_the_steady_rate_apart(monkeypatch):
    ticks = iter([0.0, 4.0, 6.8])  # start, first batch done, end
    monkeypatch.setattr("biomoe.progress.time.perf_counter", lambda: next(ticks))
    synced, bar = [], SimpleNamespace(update=lambda n: None)
    with FirstBatchClock(bar, sync=lambda: synced.append(1)) as clock:
        clock.update(262_144)
        clock.update(3_837_856)
    line = clock.report("scored", 4_100_000, "bases", lambda work, _, seconds: base_rate(work, seconds))
    assert line == ("scored 4,100,000 bases in 6.80 s: 1.37 Mbp/s after the first batch (first batch 262,144 bases "
                    "in 4.00 s, includes warm-up; 0.60 Mbp/s over the whole run)")
    assert synced == [1]  # one wait, after the first batch only
