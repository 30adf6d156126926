"""What this machine has: the size checks of commands compare a request with these figures.

A request that cannot fit (a generation held in memory, a window one forward pass must hold) is
refused in one line before any work; these are the figures the line names. No torch here, so the
checks run before anything heavy is imported.
"""

from __future__ import annotations

import os

__all__ = ["host_memory_bytes"]


def host_memory_bytes() -> int | None:
    """Physical memory of this machine in bytes; None where the platform does not say (the checks
    that use it are then skipped rather than guessed)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
