"""``pytest -m gpu tests/gpu`` (the README's command) runs every GPU test: each carries the mark.
Runs on a CPU: it only collects."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_every_test_of_the_gpu_folder_carries_the_gpu_mark():
    here = Path(__file__)
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not gpu",
                           "-p", "no:cacheprovider", str(here.parent), f"--ignore={here}"],
                          capture_output=True, text=True, cwd=here.parents[2], timeout=300)
    unmarked = [line for line in done.stdout.splitlines() if "::" in line]
    assert done.returncode == 5 and unmarked == [], done.stdout[-2000:] + done.stderr[-2000:]
