"""A callback that changes a training FASTA under a running fit, as another program might."""

from __future__ import annotations

import os

import lightning as L


class TruncateFile(L.Callback):
    """After training step ``step``, cut ``path`` to half its size (``mode=truncate``) or rewrite
    its sequence in place keeping size and mtime (``mode=rewrite``, as ``touch -r`` would)."""

    def __init__(self, path: str, step: int = 2, mode: str = "truncate") -> None:
        self.path, self.step, self.mode = path, step, mode

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != self.step:
            return
        st = os.stat(self.path)
        with open(self.path, "r+b") as handle:
            if self.mode == "truncate":
                handle.truncate(st.st_size // 2)
            else:
                data = handle.read()
                handle.seek(0)
                handle.write(data.replace(b"A", b"C"))
        os.utime(self.path, ns=(st.st_atime_ns, st.st_mtime_ns))
