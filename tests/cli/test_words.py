"""What the commands say: a missing checkpoint is not found, Ctrl-C is the user's stop (and names
no checkpoint where none is written), help names biomoe and its own rules, windows are warned
about alike and only where they matter, and a recipe's loader workers fit the machine."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from biomoe.cli.main import main
from conftest import error_line, random_dna, save_checkpoint


@pytest.fixture(scope="module")
def trained_on_128(tmp_path_factory: pytest.TempPathFactory, tiny_config) -> Path:
    """A tiny model's checkpoint that records a training window of 128 bases."""
    import torch

    from biomoe.model.transformer import MoETransformer

    torch.manual_seed(0)
    cfg = tiny_config()
    return save_checkpoint(tmp_path_factory.mktemp("w") / "m.ckpt", MoETransformer(cfg), cfg, {"seq_length": 128})


def test_markov_with_a_missing_checkpoint_says_not_found(tmp_path: Path, capsys) -> None:
    assert main(["markov", "--ckpt_path", str(tmp_path / "missing.ckpt")]) == 2
    line = error_line(capsys.readouterr().err)
    assert "missing.ckpt: checkpoint not found" in line and "training data" not in line


def test_ctrl_c_in_embed_is_the_users_stop_and_names_no_checkpoint(trained_on_128: Path, write_fasta, tmp_path: Path,
                                                                   monkeypatch, capsys) -> None:
    import biomoe.inference.embed as embed

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(embed, "embed_genome", interrupted)
    fasta = write_fasta({"chr": random_dna(300, 1)})
    assert main(["embed", str(trained_on_128), str(fasta), "--out", str(tmp_path / "e.npz"), "--no-progress"]) == 130
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines[-1].startswith("biomoe: interrupted (Ctrl-C)"), lines
    assert "error" not in lines[-1] and "checkpoint" not in lines[-1]
    assert not (tmp_path / "e.npz").exists()


def test_fit_help_names_biomoe_and_its_ckpt_path_rules(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # rendered here, not read from a cache
    monkeypatch.setattr(sys, "argv", ["-c"])  # as `python -c` (make install) fills the help cache
    with pytest.raises(SystemExit) as done:
        main(["fit", "--help"])
    assert done.value.code in (0, None)
    text = capsys.readouterr().out
    assert text.startswith("usage: biomoe [options] fit"), text[:200]
    ckpt_help = " ".join(text.split("--ckpt_path CKPT_PATH\n", 1)[1].split("--", 1)[0].split())
    assert "last.ckpt" in ckpt_help and "registry" not in ckpt_help and "hpc" not in ckpt_help


def test_score_fasta_help_says_what_device_does(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["score-fasta", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--device DEVICE auto (the default): cuda" in text


def test_markov_and_score_fasta_both_warn_about_a_short_window(trained_on_128: Path, write_fasta, tmp_path: Path,
                                                               capsys) -> None:
    fasta = write_fasta({"chr": random_dna(2000, 2)})
    assert main(["markov", str(fasta), "--seq-length", "16", "--max-order", "2"]) == 0
    markov = capsys.readouterr().err
    assert main(["score-fasta", str(trained_on_128), str(fasta), "--out", str(tmp_path / "s"), "--window", "16",
                 "--no-progress"]) == 0
    score = capsys.readouterr().err
    assert "biomoe: warning: --seq-length 16: each base sees at most 15 bases" in markov
    assert "biomoe: warning: --window 16: each base sees at most 15 bases" in score


@pytest.mark.parametrize("length, warned", [(100, False), (128, False), (129, True), (600, True)])
def test_a_long_window_is_warned_about_only_where_the_input_reaches_past_training(
        length: int, warned: bool, trained_on_128: Path, write_fasta, tmp_path: Path, capsys) -> None:
    fasta = write_fasta({"chr": random_dna(length, 3)})
    assert main(["score-fasta", str(trained_on_128), str(fasta), "--out", str(tmp_path / "s"), "--window", "1024",
                 "--no-progress"]) == 0
    assert ("longer than the 128 bases the model was trained on" in capsys.readouterr().err) == warned


def test_a_recipes_loader_workers_are_capped_at_the_usable_cores(monkeypatch) -> None:
    from biomoe.cli.run import trainer_setup

    monkeypatch.setattr(trainer_setup, "usable_cores", lambda: 2)
    from_config = {"data": {"num_workers": 8}}
    assert trainer_setup.cap_loader_workers(from_config, set()) == 2 and from_config["data"]["num_workers"] == 2
    given = {"data": {"num_workers": 8}}
    assert trainer_setup.cap_loader_workers(given, {"data.num_workers"}) is None and given["data"]["num_workers"] == 8
    few = {"data": {"num_workers": 1}}
    assert trainer_setup.cap_loader_workers(few, set()) is None and few["data"]["num_workers"] == 1


def test_genome_recipe_starts_no_more_loader_workers_than_cores(monkeypatch, capsys) -> None:
    """configs/genome.yaml asks for 8 workers: on a machine with 2 usable cores the run builds 2."""
    from biomoe.cli import lightning_cli
    from biomoe.cli.run import trainer_setup
    from conftest import ROOT

    monkeypatch.setattr(trainer_setup, "usable_cores", lambda: 2)
    seen = {}

    def stop(self) -> None:
        seen["workers"] = self.config["fit"]["data"]["num_workers"]
        raise KeyboardInterrupt

    monkeypatch.setattr(lightning_cli.BioMoECLI, "instantiate_classes", stop)
    assert main(["fit", "--config", str(ROOT / "configs/genome.yaml"),
                 "--data.fasta", str(ROOT / "data/lambda_virus.fa.gz")]) == 130
    capsys.readouterr()
    assert seen == {"workers": 2}
