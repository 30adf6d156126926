"""Long commands show progress: score-fasta on stderr, predict through Lightning's bar unless the config turns it off
(generate, embed and score-variants are checked in their own tests)."""

from __future__ import annotations

import pytest
import torch

from biomoe.model.config import ModelConfig
from biomoe.model.transformer import MoETransformer
from biomoe.cli.main import main as cli_main
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
