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

from biomoe.training.checkpoint_io import AtomicCheckpointIO

ROOT = Path(__file__).resolve().parents[1]
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
