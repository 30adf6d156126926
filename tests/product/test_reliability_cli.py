"""Bad input and bad configs through the CLI: one line naming the file/key and the problem,
non-zero exit, no traceback (unless --debug). Most cases run in-process through ``main()``;
a few run ``python cli.py`` in a subprocess to prove what a user's terminal shows."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

from biomoe.cli.main import main
from conftest import ROOT, error_line, random_dna

TINY = str(ROOT / "configs/tiny.yaml")
GOOD = (">c1\n" + random_dna(2000, 1) + "\n").encode()


def _error_line(stderr: str) -> str:
    """The last stderr line; it must be the only ``error`` line and there must be no traceback."""
    last = error_line(stderr)
    assert sum("error" in line.lower() for line in stderr.splitlines()) == 1, stderr[-3000:]
    return last


def _bad_file(tmp_path: Path, case: str) -> Path:
    path = tmp_path / f"{case}.fa"
    content = {
        "binary": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00" * 10,
        "fastq": b"@read1\nACGT\n+\nIIII\n",
        "plain_text": b"hello world\n",
        "empty": b"",
        "zero_length": b">empty\n>chr3\n",
        "duplicate": b">chr1\nACGT\n>chr1\nAC\n",
        "bad_char": b">chr1\nACGT\n>chr2\nACGTACGTAC\nACJT\n",
        "all_n": b">chr1\n" + b"N" * 2000 + b"\n",
        "too_short": b">a\nACGTACGT\n>b\nACGT\n",
    }.get(case)
    if case == "corrupt_gzip":
        path = tmp_path / "corrupt.fa.gz"
        content = gzip.compress(GOOD)[:-40]
    if case != "missing":
        path.write_bytes(content)
    return path


CASES = {
    "missing": "no such file",
    "binary": "binary",
    "fastq": "FASTQ",
    "plain_text": "does not start with '>'",
    "empty": "empty",
    "zero_length": "no record has sequence",
    "duplicate": "duplicate contig name 'chr1'",
    "bad_char": "contig 'chr2' has character 'J' outside IUPAC at position 13",
    "corrupt_gzip": "corrupted gzip",
    "all_n": "is the genome all N?",
    "too_short": "every contig is shorter than seq_length",
}


def _fit_args(fasta: Path, tmp_path: Path) -> list[str]:
    return ["fit", "--config", TINY, "--data.fasta", str(fasta), "--data.cache_dir", str(tmp_path / "cache"),
            "--trainer.default_root_dir", str(tmp_path / "run"), "--trainer.logger", "false"]


# the first case runs in `make test`, the rest in `make test-slow`
@pytest.mark.parametrize("case", [c if i == 0 else pytest.param(c, marks=pytest.mark.slow)
                                  for i, c in enumerate(CASES)])
def test_bad_fasta_in_process(tmp_path: Path, capsys, case: str) -> None:
    path = _bad_file(tmp_path, case)
    packing = ["--data.packing", "false"] if case == "too_short" else []  # packed rows take short contigs
    assert main(_fit_args(path, tmp_path) + packing) == 2
    line = _error_line(capsys.readouterr().err)
    assert str(path) in line and CASES[case] in line


def test_unreadable_path(tmp_path: Path, capsys, monkeypatch) -> None:
    path = tmp_path / "locked.fa"
    path.write_bytes(GOOD)
    real_access = os.access  # as root chmod cannot make it unreadable; os.access is what Genome asks
    monkeypatch.setattr(os, "access", lambda p, m: False if Path(p) == path else real_access(p, m))
    assert main(_fit_args(path, tmp_path)) == 2
    line = _error_line(capsys.readouterr().err)
    assert str(path) in line and "permission denied" in line


@pytest.mark.parametrize("args, expected", [case if i == 0 else pytest.param(*case, marks=pytest.mark.slow)
                                            for i, case in enumerate([  # the first case in `make test`
    (["--model.config.top_k", "5"], "model.config.top_k=5 is larger than model.config.num_experts=4"),
    (["--model.config.hidden_size", "30"], "model.config.hidden_size=30 is not divisible by model.config.num_heads=4"),
    (["--model.config.num_kv_heads", "3"], "model.config.num_kv_heads=3 does not divide model.config.num_heads=4"),
    (["--model.runtime.expert_backend", "warp"], "model.runtime.expert_backend: 'warp' is unknown"),
    (["--model.runtime.precision", "fp3"], "model.runtime.precision: 'fp3' is unknown"),
    (["--trainer.strategy", "biomoe.parallel.strategy.ExpertParallelStrategy",
      "--trainer.strategy.expert_parallel_size", "3", "--trainer.devices", "2"],
     "expert_parallel_size=3 does not divide model.config.num_experts=4"),
    (["--trainer.strategy", "biomoe.parallel.strategy.ExpertParallelStrategy",
      "--trainer.strategy.expert_parallel_size", "4", "--trainer.devices", "2"],
     "expert_parallel_size=4 does not divide the world size 2"),
    (["--model.config.nope", "3"], "model.config: Option 'nope' is not accepted"),
    (["--model.config.top_k", "two"], "model.config.top_k: Expected a <class 'int'>. Got value: two"),
    (["--data.rc_prob", "1.5"], "data.rc_prob: must be in [0, 1], got 1.5"),
    (["--data.mutation_prob", "1.0"], "data.mutation_prob: must be in [0, 1), got 1.0"),
    (["--data.stride", "0"], "data.stride: must be >= 1, got 0"),
    (["--data.batch_size", "0"], "data.batch_size: must be >= 1, got 0"),
    (["--data.num_workers", "-1"], "data.num_workers: must be >= 0, got -1"),
    (["--data.val_fraction", "1.0"], "data.val_fraction: must be in [0, 1), got 1.0"),
])])  # the rest in `make test-slow`
def test_bad_config_in_process(tmp_path: Path, capsys, args: list[str], expected: str) -> None:
    assert main(_fit_args(ROOT / "data/lambda_virus.fa.gz", tmp_path) + args) == 2
    assert expected in _error_line(capsys.readouterr().err)


def test_check_expert_parallel_helper() -> None:
    from biomoe.model.config import ConfigError, check_expert_parallel

    check_expert_parallel(8, 4, 8)
    check_expert_parallel(8, 2, 8, data_parallel_replicate_size=2)
    with pytest.raises(ConfigError, match="does not divide the world size 8 \\(devices x nodes / 2 replicas"):
        check_expert_parallel(8, 8, 8, data_parallel_replicate_size=2)
    with pytest.raises(ConfigError, match="data_parallel_replicate_size=3 does not divide the world size 8"):
        check_expert_parallel(8, 1, 8, data_parallel_replicate_size=3)


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_subprocess_bad_char_one_line_and_debug_traceback(tmp_path: Path) -> None:
    path = _bad_file(tmp_path, "bad_char")
    result = _cli(*_fit_args(path, tmp_path))
    assert result.returncode == 2
    assert _error_line(result.stderr) == (f"biomoe: error: {path}: contig 'chr2' has character 'J' "
                                          "outside IUPAC at position 13 (line 5)")
    debug = _cli(*_fit_args(path, tmp_path), "--debug")
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "GenomeInputError" in debug.stderr


@pytest.mark.slow
def test_subprocess_nan_stop_is_one_line(tmp_path: Path) -> None:
    """tiny.yaml carries NonFiniteGuard(stop): a NaN at step 3 ends the run with one line, exit 1."""
    result = _cli(*_fit_args(ROOT / "data/lambda_virus.fa.gz", tmp_path), "--trainer.max_steps", "6",
                  "--trainer.callbacks+", "helpers.recorder.PoisonForward", "--trainer.callbacks.step", "3",
                  env={"PYTHONPATH": str(ROOT / "tests")})
    assert result.returncode == 1, result.stderr[-3000:]
    line = _error_line(result.stderr)
    assert line.startswith("biomoe: error: step 3: non-finite loss, non-finite gradients in model.")


def _eval_args(command: str, fasta: Path, tmp_path: Path, ckpt: Path) -> list[str]:
    return [command, "--config", TINY, "--data.fasta", str(fasta), "--data.cache_dir", str(tmp_path / "cache"),
            "--trainer.default_root_dir", str(tmp_path / "run"), "--trainer.logger", "false",
            "--ckpt_path", str(ckpt)]


@pytest.mark.parametrize("command", ["validate", "predict"])
@pytest.mark.parametrize("kind, expected", [("missing", "checkpoint not found"),
                                            ("truncated", "not a PyTorch checkpoint")])
def test_bad_ckpt_path_is_one_line(tmp_path: Path, capsys, command: str, kind: str, expected: str) -> None:
    fasta = tmp_path / "g.fa"
    fasta.write_bytes(GOOD)
    ckpt = tmp_path / "model.ckpt"
    if kind == "truncated":
        ckpt.write_bytes(b"PK\x03\x04" + b"\x00" * 500)  # start of a zip archive, cut short
    assert main(_eval_args(command, fasta, tmp_path, ckpt)) == 2
    line = _error_line(capsys.readouterr().err)
    assert str(ckpt) in line and expected in line


@pytest.mark.parametrize("command", ["validate", "predict"])
def test_no_held_out_split_is_an_error(tmp_path: Path, capsys, command: str) -> None:
    """validate exited 0 having checked nothing; predict ended in a RuntimeError traceback."""
    fasta = tmp_path / "g.fa"
    fasta.write_bytes(GOOD)
    torch = pytest.importorskip("torch")
    from biomoe.model.config import ModelConfig
    from biomoe.model.transformer import MoETransformer

    ckpt = tmp_path / "m.ckpt"  # a valid checkpoint of the tiny model, so only the split is wrong
    tiny = ModelConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4,
                       top_k=2, ffn_hidden_size=32)
    torch.save({"state_dict": {f"model.{k}": v for k, v in MoETransformer(tiny).state_dict().items()}}, ckpt)
    assert main(_eval_args(command, fasta, tmp_path, ckpt) + ["--data.val_fraction", "0"]) == 2
    assert "no held-out split" in _error_line(capsys.readouterr().err)


@pytest.mark.parametrize("command", ["fit", "validate"])
def test_ckpt_hparams_do_not_override_runtime_switches(tmp_path: Path, monkeypatch, command: str) -> None:
    """Lightning merges --ckpt_path's hyperparameters over the command line: a checkpoint written with
    model.runtime.compile=true resumed or validated compiled even with --model.runtime.compile false (a
    machine without a C compiler could not run it at all). How to run comes from the config; what the model is, from the
    checkpoint."""
    torch = pytest.importorskip("torch")
    from biomoe.cli.lightning_cli import BioMoECLI, run_lightning_cli
    from biomoe.model.config import ModelConfig

    ckpt = tmp_path / "m.ckpt"
    config = {**vars(ModelConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                                 num_experts=4, top_k=2, ffn_hidden_size=32)), "dropout": 0.25}
    runtime = {"compile": True, "activation_checkpointing": True, "precision": "fp8-block"}
    from biomoe.model.transformer import MoETransformer

    weights = {f"model.{k}": v for k, v in MoETransformer(ModelConfig(**config)).state_dict().items()}
    # optimizer state present (empty): fit resumes only full checkpoints, and this one is parsed, not restored
    torch.save({"state_dict": weights, "hyper_parameters": {"config": config, "runtime": runtime},
                "optimizer_states": []}, ckpt)
    seen = {}

    class Stop(Exception):
        pass

    def capture(self) -> None:
        seen.update(self.config[self.config["subcommand"]]["model"].as_dict())
        raise Stop

    monkeypatch.setattr(BioMoECLI, "before_instantiate_classes", capture)
    with pytest.raises(Stop):
        run_lightning_cli([command, "--config", TINY, "--model.runtime.compile", "false",
                           "--ckpt_path", str(ckpt)])
    runtime = seen["runtime"]
    assert runtime["compile"] is False and runtime["activation_checkpointing"] is False
    assert runtime["precision"] == "bf16"
    assert seen["config"]["dropout"] == 0.25  # the model itself still comes from the checkpoint


@pytest.mark.parametrize("command", ["validate", "fit"])
def test_folder_ckpt_path_on_one_device_is_one_line(tmp_path: Path, capsys, command: str) -> None:
    """A distributed checkpoint (folder) under the single-device strategy ended in IsADirectoryError."""
    fasta = tmp_path / "g.fa"
    fasta.write_bytes(GOOD)
    folder = tmp_path / "last.ckpt"
    folder.mkdir()
    (folder / ".metadata").write_bytes(b"")  # what torch.distributed.checkpoint writes
    (folder / "__0_0.distcp").write_bytes(b"")
    assert main(_eval_args(command, fasta, tmp_path, folder)) == 2
    line = _error_line(capsys.readouterr().err)
    assert str(folder) in line and "python -m biomoe.checkpoint.distributed" in line
