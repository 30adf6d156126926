"""What an inference command imports: ``cli.py ARGS`` run in a fresh interpreter, which then lists
the heavy modules it loaded. Shared by tests/product/test_import_set.py (CPU) and
tests/gpu/test_import_set_gpu.py (``device="cuda"``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("lightning", "pytorch_lightning", "torchmetrics", "transformers", "torch._dynamo", "scipy",
             "matplotlib", "transformer_engine")


def imported_by(args: list, cache: Path, device: str = "cpu") -> set[str]:
    """The forbidden modules in ``sys.modules`` after ``cli.py ARGS`` ran in a fresh interpreter
    (also the GPU suite's check, with ``device="cuda"``)."""
    code = ("import runpy, sys\n"
            f"sys.argv = ['cli.py', *{[str(a) for a in args]!r}, '--no-progress', '--device', {device!r}]\n"
            "try:\n"
            "    runpy.run_path('cli.py', run_name='__main__')\n"
            "except SystemExit as exc:\n"
            "    assert exc.code in (0, None), exc.code\n"
            f"forbidden = {FORBIDDEN!r}\n"
            "print('@@' + ' '.join(sorted({f for f in forbidden for m in list(sys.modules)\n"
            "                              if m == f or m.startswith(f + '.')})))\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "BIOMOE_DEBUG": "1"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return set(done.stdout.rpartition("@@")[2].split())
