"""Atomic checkpoints: a process SIGKILLed in the middle of a save leaves the previous checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from biomoe.checkpoint.save import AtomicCheckpointIO
from conftest import ROOT

HELPER = ROOT / "tests" / "helpers" / "kill_mid_save.py"
FULL_SIZE = 16 * (256 << 10) * 4  # bytes of the new checkpoint's tensors alone


def _wait_for(marker: Path, proc: subprocess.Popen, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if marker.exists() and marker.read_text():
            return json.loads(marker.read_text())
        if proc.poll() is not None:
            pytest.fail(f"helper exited early: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail("helper never reached the freeze point")


@pytest.mark.parametrize(("mode", "previous"), [("write", True), ("fsync", False)])
@pytest.mark.slow
def test_sigkill_mid_save_keeps_previous_checkpoint(tmp_path: Path, mode: str, previous: bool) -> None:
    target = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    old = {"state_dict": {"w": torch.ones(4)}, "global_step": 1}
    if previous:
        io.save_checkpoint(old, target)
        old_bytes = target.read_bytes()
    marker = tmp_path / "marker.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(HELPER), str(target), str(marker), mode],
                            env=env, stderr=subprocess.PIPE)
    info = _wait_for(marker, proc)
    assert "finished" not in info, "the save completed before the kill"
    # The kill lands while the new checkpoint is being written: its temp file is on disk.
    assert len(info["temps"]) == 1
    tmp = Path(info["temps"][0])
    assert tmp.parent == target.parent and tmp.stat().st_size > 0
    if mode == "write":
        assert 0 < tmp.stat().st_size < FULL_SIZE  # truly partial
    else:
        assert tmp.stat().st_size > FULL_SIZE  # complete, but not yet renamed
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    if previous:
        assert target.read_bytes() == old_bytes  # nothing under the final name changed
        loaded = io.load_checkpoint(target)
        assert loaded["global_step"] == 1 and torch.equal(loaded["state_dict"]["w"], torch.ones(4))
    else:
        assert not target.exists()  # no partial file under the final name
    # The next save still works and replaces the target atomically.
    io.save_checkpoint({"global_step": 3}, target)
    assert io.load_checkpoint(target)["global_step"] == 3


# ------------------------------------------------------------------------------------------------
# Checkpoints are verified before they are loaded
# ------------------------------------------------------------------------------------------------
import copy  # noqa: E402
import zipfile  # noqa: E402

from biomoe.cli.main import main  # noqa: E402
from conftest import error_line as _error_line  # noqa: E402

TINY = str(ROOT / "configs/tiny.yaml")
LAMBDA = str(ROOT / "data/lambda_virus.fa.gz")


def _args(command: str, root: Path, *extra: str) -> list[str]:
    return [command, "--config", TINY, "--data.cache_dir", str(root / "cache"), "--trainer.default_root_dir",
            str(root / "run"), "--trainer.logger", "false", *extra]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A run folder with the checkpoints of a 4-step tiny fit (validated at step 4)."""
    root = tmp_path_factory.mktemp("trained")
    assert main(_args("fit", root, "--trainer.max_steps", "4", "--trainer.val_check_interval", "4")) == 0
    return root


def _damaged(trained: Path, tmp_path: Path, kind: str) -> Path:
    source = trained / "run" / "checkpoints" / "last.ckpt"
    ckpt = torch.load(source, weights_only=False)
    out = tmp_path / f"{kind}.ckpt"
    if kind == "mismatch":  # hyper-parameters edited: they no longer describe the tensors
        bad = copy.deepcopy(ckpt)
        bad["hyper_parameters"]["config"].update(hidden_size=64, num_heads=8)
        torch.save(bad, out)
    elif kind == "nan":
        bad = copy.deepcopy(ckpt)
        bad["state_dict"]["model.blocks.1.mlp.experts.down_proj"][0, 0, 0] = float("nan")
        torch.save(bad, out)
    elif kind == "nan_optimizer":
        bad = copy.deepcopy(ckpt)
        state = next(iter(bad["optimizer_states"][0]["state"].values()))
        state["exp_avg"].view(-1)[0] = float("inf")
        torch.save(bad, out)
    elif kind == "not_a_dict":
        torch.save(torch.zeros(3), out)
    elif kind == "bare_state_dict":
        torch.save(ckpt["state_dict"], out)
    elif kind == "foreign_dict":
        torch.save({"epoch": 3, "weights": [1, 2]}, out)
    elif kind == "corrupted":  # one bit flipped inside a tensor: torch.load would not notice
        data = bytearray(source.read_bytes())
        with zipfile.ZipFile(source) as archive:
            member = max(archive.infolist(), key=lambda i: i.file_size)
        data[member.header_offset + 30 + len(member.filename) + len(member.extra) + 17] ^= 0x10
        out.write_bytes(bytes(data))
    return out


DAMAGE = {
    "mismatch": "tensor model.embed.weight has shape [64, 32] but the model config gives [64, 64]: the "
                "hyper-parameters do not match the weights",
    "nan": "tensor model.blocks.1.mlp.experts.down_proj has 1 non-finite value (NaN or inf)",
    "nan_optimizer": "non-finite value (NaN or inf); refusing to resume from it",
    "not_a_dict": "not a biomoe checkpoint: the file holds a Tensor, not a checkpoint dict",
    "bare_state_dict": "not a biomoe checkpoint: no 'state_dict'",
    "foreign_dict": "not a biomoe checkpoint: no 'state_dict' (keys: 'epoch', 'weights')",
    "corrupted": "fails its CRC check",
}


# every kind through validate; the other commands share the same check (a few kinds each)
CASES = [("validate", kind) for kind in DAMAGE] + [("predict", "mismatch"), ("predict", "corrupted"),
                                                   ("fit", "nan_optimizer"), ("fit", "mismatch")]


@pytest.mark.parametrize("command, kind", [case if i == 0 else pytest.param(*case, marks=pytest.mark.slow)
                                           for i, case in enumerate(CASES)])  # first case: make test; rest: test-slow
def test_damaged_checkpoint_is_refused_by_name(trained: Path, tmp_path: Path, capsys, command: str,
                                               kind: str) -> None:
    ckpt = _damaged(trained, tmp_path, kind)
    extra = ["--trainer.max_steps", "6"] if command == "fit" else []
    assert main(_args(command, tmp_path, "--ckpt_path", str(ckpt), *extra)) == 2
    line = _error_line(capsys.readouterr().err)
    assert line.startswith(f"biomoe: error: {ckpt}: ") and DAMAGE[kind] in line, line
    assert not (tmp_path / "run" / "predictions").exists()


@pytest.mark.parametrize("kind", ["mismatch", "nan", "corrupted", "bare_state_dict"])
def test_scoring_tools_refuse_damaged_checkpoints(trained: Path, tmp_path: Path, capsys, kind: str) -> None:
    ckpt = _damaged(trained, tmp_path, kind)
    assert main(["score-fasta", str(ckpt), LAMBDA, "--out", str(tmp_path / "scores"), "--no-progress"]) == 2
    line = _error_line(capsys.readouterr().err)
    expected = DAMAGE[kind].replace("the model config", "its recorded model config")
    assert line.startswith(f"biomoe: error: {ckpt}: ") and expected in line, line
    assert not (tmp_path / "scores.tsv").exists()


@pytest.mark.slow
def test_best_and_last_resolve_to_the_run_checkpoints(trained: Path, capsys) -> None:
    for alias in ("best", "last"):
        assert main(_args("validate", trained, "--ckpt_path", alias)) == 0
        err = capsys.readouterr().err
        assert "untrained" not in err and "Traceback" not in err


@pytest.mark.parametrize("alias", ["best", "last"])
def test_best_or_last_without_a_fit_is_one_line(tmp_path: Path, capsys, alias: str) -> None:
    assert main(_args("validate", tmp_path, "--ckpt_path", alias)) == 2
    line = _error_line(capsys.readouterr().err)
    assert f"ckpt_path: '{alias}': no " in line and "run fit first" in line


@pytest.mark.parametrize("command", ["validate", "test", "predict"])
def test_no_checkpoint_warns_that_the_weights_are_untrained(tmp_path: Path, capsys, command: str) -> None:
    extra = ["--data.test_fraction", "0.1"] if command == "test" else []
    assert main(_args(command, tmp_path, "--trainer.limit_val_batches", "1", "--trainer.limit_test_batches", "1",
                      "--trainer.limit_predict_batches", "1", *extra)) == 0
    err = capsys.readouterr().err
    assert f"biomoe: warning: {command} without --ckpt_path uses untrained (randomly initialised) weights" in err


def test_checkpoints_get_the_umask_permissions(trained: Path) -> None:
    mask = os.umask(0)
    os.umask(mask)
    for path in (trained / "run" / "checkpoints").glob("*.ckpt"):
        assert (path.stat().st_mode & 0o777) == 0o666 & ~mask, path


@pytest.mark.slow
def test_ctrl_c_during_a_checkpoint_write_exits_cleanly(tmp_path: Path) -> None:
    """SIGINT lands while torch's zip writer is writing the third checkpoint file (step 4's): exit 130
    with one line, the checkpoints written before are intact, no partial file is left, and the
    steps trained since the newest complete file are kept in last.ckpt, which the line names with
    the step it holds."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    result = subprocess.run([sys.executable, str(ROOT / "cli.py"), *_args("fit", tmp_path, "--trainer.max_steps", "6",
                            "--trainer.val_check_interval", "2", "--trainer.callbacks+",
                            "helpers.interrupt.InterruptDuringSave")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 130, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "KeyboardInterrupt" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("biomoe: interrupted (Ctrl-C)")
    folder = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["epoch=0-step=2.ckpt", "last.ckpt"]
    assert torch.load(folder / "epoch=0-step=2.ckpt", weights_only=False)["global_step"] == 2
    assert torch.load(folder / "last.ckpt", weights_only=False)["global_step"] == 4
    assert f"saved: {folder / 'last.ckpt'} (step 4)" in lines[-1], lines[-1]
