"""Private TorchInductor API biomoe relies on. Tested with torch 2.11 (CUDA 13.0) and 2.13 (CPU).

- ``torch._inductor.async_compile.shutdown_compile_workers``: torch.compile compiles kernels in a
  pool of worker processes that lives until the interpreter exits, and waiting for that pool at exit
  can keep a finished process (a test run, a benchmark) alive for tens of seconds. Shutting it
  down once the compiled work is done lets the process end at once.
- ``torch._inductor.codegen.triton.TritonKernel.load`` and its CSE's ``invalidated_stores``: a
  reduction kernel with two loops may store a buffer in the first and read it back in the second,
  and Triton can place that store and its read-back on different warps, so a warp may read before
  another warp's write is visible (stale or uninitialised values). Inductor guards the opposite
  order (a barrier before a store over what was read) but not this one;
  :func:`barrier_before_read_back` adds a ``tl.debug_barrier()`` before such a read.
"""

from __future__ import annotations

import sys

__all__ = ["TESTED_WITH", "barrier_before_read_back", "shutdown_compile_workers"]

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


_PATCHED = "_biomoe_barrier_before_read_back"


def barrier_before_read_back(kernel_class: type | None = None) -> bool:
    """Make Triton kernels that inductor generates wait for every warp's stores before reading
    back a buffer stored earlier in the same kernel (across a reduction loop's boundary, where its
    CSE marks the buffer an invalidated store). The barrier goes into the kernel's body, which
    then holds the finished loop that stored: it runs after that loop and before the next loop
    (or the lifted load) that reads.
    Idempotent; True once installed. ``kernel_class`` is for tests (default: inductor's
    ``TritonKernel``, imported only here)."""
    if kernel_class is None:
        from torch._inductor.codegen.triton import TritonKernel as kernel_class
    load = kernel_class.load
    if getattr(load, _PATCHED, False):
        return True
    from torch._inductor.codegen.common import DeferredLine

    def load_after_barrier(self, name, index):
        if name in getattr(self.cse, "invalidated_stores", ()):  # a torch without it: no barrier, as before
            self.body.writeline(DeferredLine(name, "tl.debug_barrier()"))
        return load(self, name, index)

    setattr(load_after_barrier, _PATCHED, True)
    kernel_class.load = load_after_barrier
    return True
