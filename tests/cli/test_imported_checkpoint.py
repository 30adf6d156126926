"""A checkpoint written by ``import-hf`` is read by every command that takes a checkpoint.

It records the weights and the model's shape but nothing of a training run (no loop progress, no
optimizer state, no FASTA files): validate/test/predict score it on the FASTA given, fit starts
from it only as weights, and one written by an earlier ``import-hf`` (an empty loop record, the
config as a dataclass) is read too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

pytest.importorskip("safetensors")

from biomoe.cli.main import main  # noqa: E402
from biomoe.model.config import ModelConfig  # noqa: E402
from conftest import ROOT, error_line, random_dna  # noqa: E402

LAMBDA = str(ROOT / "data/lambda_virus.fa.gz")
TINY = str(ROOT / "configs/tiny.yaml")


@pytest.fixture(scope="module")
def imported(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from biomoe.interop.hf import export_hf, import_hf

    folder = tmp_path_factory.mktemp("imported")
    export_hf(tiny_checkpoint, folder / "hf")
    return import_hf(folder / "hf", folder / "back.ckpt")


@pytest.fixture(scope="module")
def imported_earlier(imported: Path) -> Path:
    """The file an earlier import-hf wrote: an empty ``loops`` record and the configs as dataclasses."""
    from biomoe.model.config import OptimConfig

    ckpt = torch.load(imported, weights_only=False)
    ckpt["loops"], ckpt["callbacks"] = {}, {}
    ckpt["hyper_parameters"] = {"config": ModelConfig(**ckpt["hyper_parameters"]["config"]), "optim": OptimConfig(),
                                "log_expert_load_every_n_steps": 50}
    path = imported.with_name("earlier.ckpt")
    torch.save(ckpt, path)
    return path


def _quiet(tmp_path: Path) -> list[str]:
    return ["--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false",
            "--data.val_fraction", "0.02"]


@pytest.mark.parametrize("command", ["validate", "test", "predict"])
@pytest.mark.parametrize("which", ["imported", "imported_earlier"])
def test_scoring_commands_read_an_imported_checkpoint(command: str, which: str, request, tmp_path: Path,
                                                      capsys) -> None:
    ckpt = request.getfixturevalue(which)
    code = main([command, "--ckpt_path", str(ckpt), "--data.fasta", LAMBDA, *_quiet(tmp_path)])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    assert "Traceback" not in captured.err and "Unable to serialize" not in captured.err
    if command == "predict":
        assert (tmp_path / "predictions" / "window_scores.tsv").is_file()
    else:
        assert f"{'val' if command == 'validate' else 'test'}/bits_per_base" in captured.out


def test_without_data_fasta_it_asks_for_one_instead_of_scoring_the_bundled_genome(imported: Path, tmp_path: Path,
                                                                                  capsys) -> None:
    assert main(["validate", "--ckpt_path", str(imported), *_quiet(tmp_path)]) == 2
    line = error_line(capsys.readouterr().err)
    assert str(imported) in line and "--data.fasta" in line and "lambda_virus" not in line


def test_use_commands_read_an_imported_checkpoint(imported: Path, write_fasta, tmp_path: Path, capsys) -> None:
    fasta = write_fasta({"chr": random_dna(600, 7)})
    ckpt = str(imported)
    runs = {
        "score-fasta": ["score-fasta", ckpt, str(fasta), "--out", str(tmp_path / "s"), "--window", "128"],
        "embed": ["embed", ckpt, str(fasta), "--out", str(tmp_path / "e.npz"), "--window", "128"],
        "generate": ["generate", ckpt, "--prompt", "ACGT", "--length", "20", "--out", str(tmp_path / "g.fa")],
        "export-hf": ["export-hf", ckpt, str(tmp_path / "hf")],
    }
    for name, argv in runs.items():
        assert main([*argv, *(["--no-progress"] if name != "export-hf" else [])]) == 0, (
            name, capsys.readouterr().err[-3000:])
    assert (tmp_path / "s.tsv").is_file() and (tmp_path / "e.npz").is_file() and (tmp_path / "g.fa").is_file()
    assert (tmp_path / "hf" / "model.safetensors").is_file()


def test_fit_resuming_an_imported_checkpoint_is_one_line_that_names_fine_tuning(imported: Path, tmp_path: Path,
                                                                               capsys) -> None:
    code = main(["fit", "--config", TINY, "--ckpt_path", str(imported), "--data.fasta", LAMBDA,
                 "--trainer.default_root_dir", str(tmp_path)])
    assert code == 2
    line = error_line(capsys.readouterr().err)
    assert str(imported) in line and "InitWeights" in line


@pytest.mark.slow
@pytest.mark.parametrize("which", ["imported", "imported_earlier"])
def test_fit_fine_tunes_from_an_imported_checkpoint(which: str, request, tmp_path: Path, capsys) -> None:
    ckpt = request.getfixturevalue(which)
    code = main(["fit", "--config", TINY, "--data.fasta", LAMBDA, "--trainer.max_steps", "2",
                 "--trainer.val_check_interval", "2", "--trainer.default_root_dir", str(tmp_path),
                 "--trainer.callbacks+=biomoe.training.optimization.init_weights.InitWeights",
                 "--trainer.callbacks.checkpoint", str(ckpt), "--model.config.ffn_hidden_size", "32"])
    assert code == 0, capsys.readouterr().err[-3000:]
    assert next(tmp_path.rglob("last.ckpt")).is_file()


def test_imported_checkpoint_records_plain_configs(imported: Path) -> None:
    """The hyper-parameters are plain data, as fit writes them: the command line's parser reads them
    back without jsonargparse's "Unable to serialize" warnings."""
    ckpt = torch.load(imported, weights_only=True)
    config = ckpt["hyper_parameters"]["config"]
    assert isinstance(config, dict) and not dataclasses.is_dataclass(config)
    assert ModelConfig(**config).num_experts == 4
