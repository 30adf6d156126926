"""Where a run writes, and that only runs that ran leave a folder.

Every recipe names its folder three times (``trainer.default_root_dir``, the logger's ``save_dir``,
sometimes a ModelCheckpoint ``dirpath``), and Lightning lets the logger's and the callback's win: a
``--trainer.default_root_dir runs/x`` on the command line was silently ignored. Here that one
option moves the whole run: the logger, the checkpoints, and with them the plot, the summary's
files and predictions (which go into the logger's version folder). A ``save_dir`` or ``dirpath``
also given on the command line is the user's explicit choice and stays.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from typing import Any

__all__ = ["follow_root_dir", "options_given", "remove_unstarted_run_folder"]

LOGGER_LEFTOVERS = frozenset({"hparams.yaml", "metrics.csv"})
"""What a logger writes into a run folder before the run has computed anything (removable)."""


def options_given(argv: Iterable[str]) -> set[str]:
    """The ``--key`` names on a command line (``--a.b=1`` and ``--a.b 1`` alike), without dashes."""
    return {arg[2:].split("=", 1)[0] for arg in argv if isinstance(arg, str) and arg.startswith("--")}


def _entries(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _init_args(entry: Any) -> Any:
    """The ``init_args`` of a ``class_path`` entry (a jsonargparse Namespace or a dict), else None."""
    if entry is None or isinstance(entry, (bool, str)) or not hasattr(entry, "get"):
        return None
    return entry.get("init_args")


def _is_model_checkpoint(entry: Any) -> bool:
    path = str(entry.get("class_path") or "") if hasattr(entry, "get") else ""
    return path.rsplit(".", 1)[-1] == "ModelCheckpoint"


def follow_root_dir(section: Any, given: set[str]) -> list[str]:
    """When ``trainer.default_root_dir`` is in ``given`` (options on the command line), point every
    configured logger's ``save_dir`` there and let every ModelCheckpoint's ``dirpath`` follow the
    logger (``None``: ``<log dir>/checkpoints``), unless the command line set those too.
    ``section`` is one subcommand's parsed config, changed in place; returns the keys changed."""
    if "trainer.default_root_dir" not in given:
        return []
    trainer = section.get("trainer")
    root = trainer.get("default_root_dir") if trainer is not None else None
    if not root:
        return []
    changed: list[str] = []
    if not any("logger" in key and "save_dir" in key for key in given):
        for entry in _entries(trainer.get("logger")):
            args = _init_args(entry)
            if args is not None and args.get("save_dir") not in (None, root):
                args["save_dir"] = root
                changed.append("trainer.logger.save_dir")
    if not any("dirpath" in key for key in given):
        for entry in _entries(trainer.get("callbacks")):
            args = _init_args(entry)
            if args is not None and _is_model_checkpoint(entry) and args.get("dirpath") is not None:
                args["dirpath"] = None
                changed.append("ModelCheckpoint.dirpath")
    return changed


def remove_unstarted_run_folder(log_dir: str | os.PathLike[str]) -> bool:
    """Remove ``log_dir``, a folder the failed start created, when it holds nothing of a run: only
    empty folders and what a logger writes before any step (:data:`LOGGER_LEFTOVERS`). Anything else
    (a checkpoint, a file of the user's) keeps the whole folder. Returns whether it was removed."""
    if not os.path.isdir(log_dir):
        return False
    for root, _, names in os.walk(log_dir):
        if any(name not in LOGGER_LEFTOVERS or root != os.fspath(log_dir) for name in names):
            return False
    shutil.rmtree(log_dir, ignore_errors=True)
    return not os.path.exists(log_dir)
