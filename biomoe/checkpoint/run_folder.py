"""Which checkpoint a run folder or ``--ckpt_path best|last`` means: one rule for every command.

``fit`` keeps the best checkpoint (``ModelCheckpoint(monitor="val/bits_per_base", save_top_k=1)``)
and ``last.ckpt``; on a small genome the last one is often over-fitted, so scoring or exporting it by
default would throw the run's best result away. Every command that takes a checkpoint therefore also
takes the run folder (``runs/genome`` or one ``version_N`` in it), and validate/test/predict take
``--ckpt_path best``; both mean, in this order:

1. the best checkpoint by the monitored metric, as a ModelCheckpoint with a ``monitor`` recorded it
   (in the newest ``last*.ckpt``, else the newest checkpoint that records one; looked up by file
   name inside the folder if the folder has moved);
2. else the newest file named ``best*`` (a best checkpoint whose callback state was stripped);
3. else the newest ``last*.ckpt``, then the newest checkpoint of any name.

Only comparable runs compete: a run folder collects every run started with the same recipe, and a
best ``val/bits_per_base`` on one genome says nothing against one on another. The choice is made
among the checkpoints validated on the same data (FASTA files, held-out contigs, files or fraction,
window length) as the newest ``last*.ckpt`` (else the newest checkpoint): the run the user ran
last. Checkpoints that do not record their data (distributed ones) are kept.

``--ckpt_path last`` is the newest ``last*.ckpt``. The choice is printed as one line on stderr, so a
user always knows which weights were used (and how many checkpoints of other runs were left out).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from biomoe.checkpoint.read import read_checkpoint_or_none
from biomoe.errors import GenomeInputError

__all__ = ["best_recorded", "checkpoints_under", "choose_checkpoint", "comparable", "is_distributed_checkpoint",
           "resolve_checkpoint", "say_on_stderr", "validation_data"]

MONITOR = "val/bits_per_base"

VALIDATION_KEYS = ("fasta", "val_files", "val_contigs", "val_fraction", "seq_length")
"""The data settings that decide which held-out bases a run's validation scored."""


def validation_data(ckpt: Path) -> tuple | None:
    """What a checkpoint's validation scored (:data:`VALIDATION_KEYS` of its recorded data
    settings), or None when it records none (distributed checkpoints, weights-only files)."""
    if ckpt.is_dir():
        return None
    state = read_checkpoint_or_none(ckpt)
    data = state.get("datamodule_hyper_parameters") if state is not None else None
    if not isinstance(data, dict):
        return None

    def plain(value: Any) -> Any:
        return tuple(plain(v) for v in value) if isinstance(value, (list, tuple)) else value
    return tuple(plain(data.get(key)) for key in VALIDATION_KEYS)


def comparable(candidates: list[Path]) -> tuple[list[Path], int]:
    """The candidates (oldest first) validated on the same data as the newest ``last*.ckpt`` (else
    the newest candidate), with those that record none; and how many were left out."""
    if not candidates:
        return [], 0
    lasts = [c for c in candidates if c.name.startswith("last")]
    reference = validation_data((lasts or candidates)[-1])
    if reference is None:
        return candidates, 0
    kept = [c for c in candidates if validation_data(c) in (None, reference)]
    return kept, len(candidates) - len(kept)


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


def best_recorded(ckpt: Path) -> tuple[str, float | None, str] | None:
    """``(best_model_path, best_model_score, monitor)`` that a ModelCheckpoint with a monitor stored in ``ckpt``
    (validation bits/base preferred where several did; None for weights-only or distributed
    checkpoints, which carry no callback state). A ModelCheckpoint without a monitor keeps the latest
    file, not the best, so its record does not count."""
    if ckpt.is_dir():
        return None
    state = read_checkpoint_or_none(ckpt)
    callbacks: dict[str, Any] = (state.get("callbacks") or {}) if state is not None else {}
    found: list[tuple[bool, str, float | None, str]] = []
    for key, value in callbacks.items():
        if not (str(key).startswith("ModelCheckpoint") and isinstance(value, dict)):
            continue
        if value.get("monitor") and value.get("best_model_path"):
            score = value.get("best_model_score")
            found.append((value["monitor"] == MONITOR, str(value["best_model_path"]),
                          None if score is None else float(score), str(value["monitor"])))
    if not found:
        return None
    _, path, score, monitor = max(found, key=lambda item: item[0])
    return path, score, monitor


def choose_checkpoint(candidates: list[Path]) -> tuple[Path, str]:
    """The checkpoint among ``candidates`` (sorted oldest first) that the module's rule picks, and why;
    only checkpoints comparable with the newest run's compete (:func:`comparable`)."""
    candidates, left_out = comparable(candidates)
    chosen, why = _choose(candidates)
    if left_out:
        why += (f"; {left_out} checkpoint{'s' if left_out > 1 else ''} of runs validated on other data "
                "left out")
    return chosen, why


def _choose(candidates: list[Path]) -> tuple[Path, str]:
    lasts = [c for c in candidates if c.name.startswith("last")]
    newest_first = list(reversed(lasts)) + [c for c in reversed(candidates) if c not in lasts]
    resolved = {c.resolve(): c for c in candidates}
    missing = ""
    for record_holder in newest_first:
        recorded = best_recorded(record_holder)
        if recorded is None:
            continue
        best_path, score, monitor = recorded
        by_name = [c for c in candidates if c.name == Path(best_path).name]
        chosen = resolved.get(Path(best_path).resolve()) if Path(best_path).exists() else None
        chosen = chosen or (by_name[-1] if by_name else None)
        if chosen is not None:
            return chosen, f"best {monitor}" + (f" {score:.4f}" if score is not None else "")
        missing = f"the recorded best {Path(best_path).name} is gone"
        break
    reason = missing or "no best checkpoint recorded"
    named_best = [c for c in candidates if c.name.startswith("best")]
    if named_best and not missing:
        return named_best[-1], "newest best* checkpoint"
    if lasts:
        return lasts[-1], f"{reason}; the last one"
    return candidates[-1], f"{reason}; the newest one"


def checkpoints_under(roots: list[Path]) -> list[Path]:
    """Every checkpoint under ``roots`` (files and distributed-checkpoint folders), oldest first."""
    found = {c.resolve(): c for root in roots if root.is_dir() for c in _candidates(root)}
    return sorted(found.values(), key=lambda p: (p.stat().st_mtime, str(p)))


def say_on_stderr(message: str) -> None:
    print(f"biomoe: {message}", file=sys.stderr)


def resolve_checkpoint(path: str | os.PathLike[str], announce: Callable[[str], None] | None = say_on_stderr) -> str:
    """``path`` itself for a checkpoint file (or a distributed-checkpoint folder); for a run folder,
    the checkpoint to use (see the module docstring), announced as one line."""
    folder = Path(path)
    if not folder.is_dir() or is_distributed_checkpoint(folder):
        return os.fspath(path)
    candidates = _candidates(folder)
    if not candidates:
        raise GenomeInputError(folder, "folder holds no checkpoint (*.ckpt)")
    chosen, why = choose_checkpoint(candidates)
    if announce is not None:
        announce(f"{folder}: using {chosen} ({why})")
    return os.fspath(chosen)
