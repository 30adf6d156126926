"""A checkpoint cannot run code: files are read with torch's weights-only unpickler, a pickled
callable is refused with one line naming it, and only ``--trust-checkpoint`` loads it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from biomoe.checkpoint.read import read_checkpoint
from biomoe.checkpoint.safe_types import TRUST_ENV, checkpoint_types, trusting
from biomoe.cli.main import main as cli_main
from biomoe.errors import GenomeInputError
from biomoe.model.config import ModelConfig, OptimConfig, RuntimeConfig
from biomoe.model.transformer import MoETransformer
from conftest import error_line, save_checkpoint

CFG = dict(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
           ffn_hidden_size=32)
REFUSED = "holds a pickled 'posix.system' object, which loading would run"


class RunsCommand:
    """What an attacker pickles: unpickling it calls ``os.system``."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def tiny_checkpoint(path: Path, **hparams) -> Path:
    cfg = ModelConfig(**CFG)
    torch.manual_seed(0)
    save_checkpoint(path, MoETransformer(cfg), cfg)
    if hparams:
        ckpt = torch.load(path, weights_only=False)
        ckpt["hyper_parameters"].update(hparams)
        torch.save(ckpt, path)
    return path


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "MARKER"
    return tiny_checkpoint(tmp_path / "m.ckpt", note=RunsCommand(f"touch {marker}")), marker


@pytest.fixture
def fasta(write_fasta) -> Path:
    return write_fasta({"a": "ACGT" * 40})


def test_trust_is_off_by_default():
    assert os.environ.get(TRUST_ENV) is None


def test_nothing_allowlisted_can_run_code():
    for cls in checkpoint_types():
        assert cls.__module__.startswith(("biomoe.", "pathlib")), cls
    assert {ModelConfig, OptimConfig, RuntimeConfig} <= set(checkpoint_types())


def test_read_refuses_a_pickled_callable(hostile):
    path, marker = hostile
    with pytest.raises(GenomeInputError, match=f"{REFUSED}; .*--trust-checkpoint"):
        read_checkpoint(path)
    assert not marker.exists()


def test_trusting_loads_with_the_full_unpickler(hostile):
    path, marker = hostile
    with trusting():
        read_checkpoint(path)
    assert marker.exists()
    assert os.environ.get(TRUST_ENV) is None


def test_earlier_checkpoints_load(tmp_path):
    """conftest's layout (a ModelConfig dataclass), and hyper-parameters holding every config type
    and a path, as the Python API's ``save_hyperparameters`` records them."""
    plain = read_checkpoint(tiny_checkpoint(tmp_path / "a.ckpt"))
    assert plain["hyper_parameters"]["config"] == ModelConfig(**CFG)
    rich = tiny_checkpoint(tmp_path / "b.ckpt", optim=OptimConfig(), runtime=RuntimeConfig(), fasta=tmp_path / "g.fa")
    got = read_checkpoint(rich)["hyper_parameters"]
    assert got["optim"] == OptimConfig() and got["runtime"] == RuntimeConfig()
    assert got["fasta"] == tmp_path / "g.fa"


def test_score_fasta_refuses_then_trusts(hostile, fasta, tmp_path, capsys):
    path, marker = hostile
    assert cli_main(["score-fasta", str(path), str(fasta), "--out", str(tmp_path / "s")]) == 2
    line = error_line(capsys.readouterr().err)
    assert REFUSED in line and "--trust-checkpoint" in line
    assert not marker.exists()
    assert cli_main(["score-fasta", str(path), str(fasta), "--out", str(tmp_path / "s"), "--trust-checkpoint"]) == 0
    assert marker.exists()
    assert os.environ.get(TRUST_ENV) is None  # the command's trust ends with it


def test_export_hf_refuses(hostile, tmp_path, capsys):
    pytest.importorskip("transformers")
    path, marker = hostile
    assert cli_main(["export-hf", str(path), str(tmp_path / "hf")]) == 2
    assert REFUSED in error_line(capsys.readouterr().err)
    assert not marker.exists()


def test_generate_refuses(hostile, tmp_path, capsys):
    path, marker = hostile
    assert cli_main(["generate", str(path), "--out", str(tmp_path / "g.fa")]) == 2
    assert REFUSED in error_line(capsys.readouterr().err)
    assert not marker.exists()


def test_help_names_the_option(capsys):
    with pytest.raises(SystemExit):
        cli_main(["score-fasta", "--help"])
    assert "--trust-checkpoint" in capsys.readouterr().out


@pytest.mark.slow
def test_validate_refuses(hostile, capsys):
    path, marker = hostile
    assert cli_main(["validate", "--config", "configs/tiny.yaml", "--ckpt_path", str(path),
                     "--data.fasta", "data/lambda_virus.fa.gz"]) == 2
    assert REFUSED in error_line(capsys.readouterr().err)
    assert not marker.exists()


@pytest.mark.slow
def test_a_fit_checkpoint_loads_weights_only(tmp_path, capsys):
    """What ``fit`` writes needs nothing beyond the allowlist, and validate reads it back."""
    root = str(tmp_path / "run")
    assert cli_main(["fit", "--config", "configs/tiny.yaml", "--trainer.max_steps", "2",
                     "--trainer.default_root_dir", root, "--trainer.logger.init_args.save_dir", root]) == 0
    last = next(Path(root).rglob("last.ckpt"))
    torch.load(last, weights_only=True)
    read_checkpoint(last)
    assert cli_main(["validate", "--config", "configs/tiny.yaml", "--ckpt_path", str(last),
                     "--trainer.default_root_dir", root, "--trainer.logger.init_args.save_dir", root]) == 0


@pytest.mark.slow
def test_validate_trusting_reads_hyper_parameters_itself(tmp_path, capsys):
    """Under trust the hyper-parameters of ``--ckpt_path`` are read with the full unpickler, so a
    trusted file's other objects (here in a callback's state) do not stop validate."""
    root = str(tmp_path / "run")
    assert cli_main(["fit", "--config", "configs/tiny.yaml", "--trainer.max_steps", "2",
                     "--trainer.default_root_dir", root, "--trainer.logger.init_args.save_dir", root]) == 0
    last = next(Path(root).rglob("last.ckpt"))
    ckpt = torch.load(last, weights_only=True)
    marker = tmp_path / "MARKER"
    ckpt["callbacks"]["Foreign"] = RunsCommand(f"touch {marker}")
    torch.save(ckpt, last)
    command = ["validate", "--config", "configs/tiny.yaml", "--ckpt_path", str(last),
               "--trainer.default_root_dir", root, "--trainer.logger.init_args.save_dir", root]
    assert cli_main(command) == 2 and not marker.exists()
    assert REFUSED in error_line(capsys.readouterr().err)
    assert cli_main([*command, "--trust-checkpoint"]) == 0
    assert marker.exists() and os.environ.get(TRUST_ENV) is None
