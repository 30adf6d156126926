"""torch.compile's worker pools are shut down on request, and asking never imports inductor."""

from __future__ import annotations

import subprocess
import sys


def test_shutdown_without_inductor_loaded_imports_nothing():
    code = ("import sys; from biomoe.compat.inductor import shutdown_compile_workers as s; "
            "assert s() is False; assert 'torch._inductor.async_compile' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_shutdown_clears_the_compile_worker_pools():
    from torch._inductor import async_compile

    from biomoe.compat.inductor import shutdown_compile_workers

    assert shutdown_compile_workers() is True
    assert len(async_compile._pool_set) == 0 and async_compile.AsyncCompile._ready_future is None
