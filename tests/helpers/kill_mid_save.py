"""Start a checkpoint save with AtomicCheckpointIO and freeze at a chosen point, for a SIGKILL.

``python kill_mid_save.py TARGET MARKER write|fsync``: saves a 16 MB checkpoint (16 tensors) to TARGET.
``write`` freezes after the first ~1 MB reached the temporary file (bytes on disk, far from
complete); ``fsync`` freezes when everything is written but not yet renamed into place. At the
freeze point it writes MARKER (JSON: the temp file and bytes written so far) and sleeps, so the
test can kill it exactly there.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

from biomoe.checkpoint.save import AtomicCheckpointIO

target, marker, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
state = {"written": 0, "tmp": None}


def freeze() -> None:
    temps = sorted(str(p) for p in target.parent.glob(f".{target.name}.*.tmp"))
    marker.write_text(json.dumps({"written": state["written"], "temps": temps}))
    while True:
        time.sleep(60)


class FreezingFile:
    """File object that forwards writes and freezes once ``limit`` bytes went to disk."""

    def __init__(self, handle, limit: int) -> None:
        self._handle, self._limit = handle, limit

    def write(self, data) -> int:
        n = self._handle.write(data)
        state["written"] += len(data)
        if mode == "write" and state["written"] >= self._limit:
            self._handle.flush()
            os.fsync(self._handle.fileno())
            freeze()
        return n

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._handle.__exit__(*exc)


real_fdopen, real_fsync = os.fdopen, os.fsync
os.fdopen = lambda fd, *a, **k: FreezingFile(real_fdopen(fd, *a, **k), 1 << 20)
if mode == "fsync":
    def fsync_then_freeze(fd: int) -> None:
        real_fsync(fd)
        freeze()
    os.fsync = fsync_then_freeze

checkpoint = {"state_dict": {f"w{i}": torch.full((256 << 10,), 2.0) for i in range(16)}, "global_step": 2}
AtomicCheckpointIO().save_checkpoint(checkpoint, target)
marker.write_text(json.dumps({"finished": True}))
