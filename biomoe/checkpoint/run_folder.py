"""Which checkpoint of a run folder to use: the one with the best validation bits/base.

``fit`` keeps the best checkpoint (``ModelCheckpoint(monitor="val/bits_per_base", save_top_k=1)``)
and ``last.ckpt``; on a small genome the last one is often over-fitted, so scoring or exporting it by
default would throw the run's best result away. Commands that take a checkpoint therefore also take
the run folder (``runs/genome`` or one ``version_N`` in it) and pick, in this order:

1. the best checkpoint that ModelCheckpoint recorded in the newest checkpoint of the folder
   (its ``best_model_path``, looked up by file name inside the folder if the folder has moved);
2. the newest file whose name starts with ``best``;
3. the newest ``last*.ckpt``, then the newest checkpoint of any name.

The choice is printed as one line on stderr, so a user always knows which weights were used.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from biomoe.checkpoint.read import read_checkpoint_or_none
from biomoe.errors import GenomeInputError

__all__ = ["best_recorded", "is_distributed_checkpoint", "resolve_checkpoint"]

MONITOR = "val/bits_per_base"


def is_distributed_checkpoint(path: Path) -> bool:
    """A torch.distributed.checkpoint folder (one checkpoint written as many files)."""
    return path.is_dir() and (path / ".metadata").is_file()


def _candidates(folder: Path) -> list[Path]:
    found: list[Path] = []
    for root, dirs, files in os.walk(folder):
        here = Path(root)
        for name in list(dirs):
            if name.endswith(".ckpt") and is_distributed_checkpoint(here / name):
                found.append(here / name)
                dirs.remove(name)  # its shards are not checkpoints of their own
        found.extend(here / name for name in files if name.endswith(".ckpt"))
    return sorted(found, key=lambda p: (p.stat().st_mtime, str(p)))


def best_recorded(ckpt: Path) -> tuple[str, float | None] | None:
    """``(best_model_path, best_model_score)`` that a ModelCheckpoint monitoring validation bits/base
    stored in ``ckpt`` (None for weights-only or distributed checkpoints, which carry no callback state)."""
    if ckpt.is_dir():
        return None
    state = read_checkpoint_or_none(ckpt)
    callbacks: dict[str, Any] = (state.get("callbacks") or {}) if state is not None else {}
    for key, value in callbacks.items():
        if not (str(key).startswith("ModelCheckpoint") and isinstance(value, dict)):
            continue
        if value.get("monitor") == MONITOR and value.get("best_model_path"):
            score = value.get("best_model_score")
            return str(value["best_model_path"]), None if score is None else float(score)
    return None


def _say(message: str) -> None:
    print(f"biomoe: {message}", file=sys.stderr)


def resolve_checkpoint(path: str | os.PathLike[str], announce: Callable[[str], None] | None = _say) -> str:
    """``path`` itself for a checkpoint file (or a distributed-checkpoint folder); for a run folder,
    the checkpoint to use (see the module docstring), announced as one line."""
    folder = Path(path)
    if not folder.is_dir() or is_distributed_checkpoint(folder):
        return os.fspath(path)
    candidates = _candidates(folder)
    if not candidates:
        raise GenomeInputError(folder, "folder holds no checkpoint (*.ckpt)")
    chosen, why = None, ""
    recorded = best_recorded(candidates[-1])
    if recorded is not None:
        best_path, score = recorded
        by_name = [c for c in candidates if c.name == Path(best_path).name]
        if Path(best_path).exists() and Path(best_path).resolve() in {c.resolve() for c in candidates}:
            chosen = Path(best_path)
        elif by_name:
            chosen = by_name[-1]
        if chosen is not None:
            why = f"best {MONITOR}" + (f" {score:.4f}" if score is not None else "")
    if chosen is None:
        best = [c for c in candidates if c.name.startswith("best")]
        last = [c for c in candidates if c.name.startswith("last")]
        chosen, why = ((best[-1], "newest best* checkpoint") if best else
                       (last[-1], "no best checkpoint recorded; the last one") if last else
                       (candidates[-1], "no best checkpoint recorded; the newest one"))
    if announce is not None:
        announce(f"{folder}: using {chosen} ({why})")
    return os.fspath(chosen)
