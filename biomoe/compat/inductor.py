"""Private TorchInductor API biomoe relies on. Tested with torch 2.11 (CUDA 13.0) and 2.13 (CPU).

- ``torch._inductor.async_compile.shutdown_compile_workers``: torch.compile compiles kernels in a
  pool of worker processes that lives until the interpreter exits, and waiting for that pool at exit
  can keep a finished process (a test run, a benchmark) alive for tens of seconds. Shutting it
  down once the compiled work is done lets the process end at once.
"""

from __future__ import annotations

import sys

__all__ = ["TESTED_WITH", "shutdown_compile_workers"]

TESTED_WITH = ("2.11", "2.13")


def shutdown_compile_workers() -> bool:
    """Shut down torch.compile's worker pools, if inductor was ever loaded (never imports it).
    True when there was something to shut down."""
    module = sys.modules.get("torch._inductor.async_compile")
    if module is None:
        return False
    shutdown = getattr(module, "shutdown_compile_workers", None)
    if shutdown is None:  # a torch without it: nothing biomoe can do, the pool ends with the process
        return False
    shutdown()
    return True
