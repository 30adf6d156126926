"""The shipped master-weight optimizer where parameters are sharded: FSDP2 forced on one GPU makes
every parameter a DTensor, and the fit must train like the single-device path and resume exactly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from biomoe.backends.te.availability import te_installed

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
SCRIPT = Path(__file__).with_name("sharded_fit.py")
ROOT = Path(__file__).resolve().parents[2]


def fit(root: Path, *args: str) -> dict:
    done = subprocess.run([sys.executable, str(SCRIPT), "--root", str(root), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["losses"] = {int(k): v for k, v in result["losses"].items()}
    return result


@pytest.mark.skipif(not te_installed(), reason="the shipped GPU optimizer is Transformer Engine's FusedAdam")
def test_te_fused_adam_on_dtensors_trains_like_one_device_and_resumes(tmp_path: Path) -> None:
    single = fit(tmp_path / "single")
    sharded = fit(tmp_path / "sharded", "--shard", "--save-every", "10")
    assert not single["dtensor"] and sharded["dtensor"]
    assert sharded["optimizer"] == single["optimizer"] == "TEAdamWWithMasterWeights"
    steps = sorted(single["losses"])
    assert len(steps) == 20
    # bf16 compute in a different order of reductions: close, not bitwise
    for step in steps:
        assert sharded["losses"][step] == pytest.approx(single["losses"][step], rel=2e-2), step
    assert sharded["losses"][20] < sharded["losses"][1] - 0.05  # it learns
    ckpt = next((tmp_path / "sharded" / "ckpt").glob("step*10*.ckpt"))
    resumed = fit(tmp_path / "resumed", "--shard", "--resume", str(ckpt))
    assert sorted(resumed["losses"]) == list(range(11, 21))
    for step in range(11, 21):
        assert resumed["losses"][step] == pytest.approx(sharded["losses"][step], rel=1e-3, abs=1e-3), step
