"""A callback that presses Ctrl-C (SIGINT to its own process) in the middle of a checkpoint write.

``InterruptDuringSave(save=3)`` lets the first two checkpoint files be written; during the third,
once part of it is on disk, torch's writer gets a SIGINT, as a user's Ctrl-C landing mid-write
would (the signal arrives while torch's zip writer calls back into Python to write).
"""

from __future__ import annotations

import os
import signal

import lightning as L
import torch


class _InterruptingFile:
    """Forwards writes; after ``after`` bytes sends SIGINT to this process (once)."""

    def __init__(self, handle, after: int) -> None:
        self._handle, self._after, self._written, self._sent = handle, after, 0, False

    def write(self, data) -> int:
        n = self._handle.write(data)
        self._written += len(data)
        if not self._sent and self._written >= self._after:
            self._sent = True
            os.kill(os.getpid(), signal.SIGINT)
        return n

    def __getattr__(self, name):
        return getattr(self._handle, name)


class InterruptDuringSave(L.Callback):
    def __init__(self, save: int = 3, after_bytes: int = 4096) -> None:
        self.save, self.after_bytes = save, after_bytes

    def setup(self, trainer, pl_module, stage: str) -> None:
        real_save, calls = torch.save, [0]

        def save(obj, handle, *args, **kwargs):
            calls[0] += 1
            if calls[0] == self.save:
                handle = _InterruptingFile(handle, self.after_bytes)
            return real_save(obj, handle, *args, **kwargs)

        torch.save = save
