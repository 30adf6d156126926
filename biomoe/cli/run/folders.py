"""Where a run writes, where its checkpoints are found, and that only runs that ran leave a folder.

Every recipe names its folder three times (``trainer.default_root_dir``, the logger's ``save_dir``,
sometimes a ModelCheckpoint ``dirpath``), and Lightning lets the logger's and the callback's win: a
``--trainer.default_root_dir runs/x`` on the command line was silently ignored. Here that one
option moves the whole run: the logger, the checkpoints, and with them the plot, the summary's
files and predictions (which go into the logger's version folder). A ``save_dir`` or ``dirpath``
also given on the command line is the user's explicit choice and stays.

The commands that read a run back (``--ckpt_path best``/``last``, ``--ckpt_path runs/x``) look for
its checkpoints where those same settings put them (:func:`checkpoint_folders`,
:func:`resolve_run_folder`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from typing import Any

from biomoe.checkpoint.run_folder import resolve_checkpoint
from biomoe.cli.run.config_values import class_name, entries, get, init_args, mapping

__all__ = ["checkpoint_folders", "follow_root_dir", "free_folder", "options_given", "predictions_folder",
           "remove_unstarted_run_folder", "resolve_run_folder", "scoring_logs_nothing"]

SCORING = ("validate", "test", "predict")
"""The subcommands that read a trained run's checkpoint."""

CHECKPOINT_CLASSES = frozenset({"ModelCheckpoint", "BestCheckpoint"})
"""The checkpoint callbacks whose ``dirpath`` follows ``--trainer.default_root_dir`` (by class name)."""

LOGGER_LEFTOVERS = frozenset({"hparams.yaml", "metrics.csv"})
"""What a logger writes into a run folder before the run has computed anything (removable)."""


def options_given(argv: Iterable[str]) -> set[str]:
    """The ``--key`` names on a command line (``--a.b=1`` and ``--a.b 1`` alike), without dashes."""
    return {arg[2:].split("=", 1)[0] for arg in argv if isinstance(arg, str) and arg.startswith("--")}


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
        for entry in entries(trainer.get("logger")):
            args = init_args(entry)
            if args is not None and args.get("save_dir") not in (None, root):
                args["save_dir"] = root
                changed.append("trainer.logger.save_dir")
    if not any("dirpath" in key for key in given):
        for entry in entries(trainer.get("callbacks")):
            args = init_args(entry)
            if args is not None and class_name(entry) in CHECKPOINT_CLASSES and args.get("dirpath") is not None:
                args["dirpath"] = None
                changed.append("ModelCheckpoint.dirpath")
    return changed


def scoring_logs_nothing(section: Any, given: set[str]) -> bool:
    """validate/test/predict print their figures and, unless a ``--trainer.logger...`` option is on the
    command line, log nowhere: a logger (Lightning's default, or the recipe's) made a new
    ``version_N`` folder for every one of them, in the working folder or beside the recipe's
    training runs, which looked like runs. ``section`` is the subcommand's parsed config, changed
    in place; returns whether the logger was turned off."""
    if any(key == "trainer.logger" or key.startswith("trainer.logger.") for key in given):
        return False
    trainer = section.get("trainer")
    if trainer is None:
        return False
    trainer["logger"] = False
    return True


def predictions_folder(ckpt: Any) -> str | None:
    """Where ``predict`` writes when nothing else says: the first free ``predictions`` folder of the
    version folder that holds the checkpoint (``runs/x/version_3/checkpoints/last.ckpt``), None
    for a checkpoint outside a run's ``checkpoints/`` folder."""
    if not isinstance(ckpt, (str, os.PathLike)):
        return None
    parent = os.path.dirname(os.path.abspath(os.fspath(ckpt)))
    if os.path.basename(parent) != "checkpoints":
        return None
    return free_folder(os.path.join(os.path.dirname(parent), "predictions"))


def free_folder(path: str) -> str:
    """``path``, or ``path_1``, ``path_2``, ... : the first that is missing or an empty folder (one
    run's results never replace another's)."""
    candidate, n = path, 0
    while os.path.exists(candidate) and (not os.path.isdir(candidate) or os.listdir(candidate)):
        n += 1
        candidate = f"{path}_{n}"
    return candidate


def checkpoint_folders(section: Any) -> list[str]:
    """Where one subcommand's run (``section``, its parsed config) keeps its checkpoints, most
    specific first: the callbacks' ``dirpath`` if any is set, else the loggers' ``save_dir`` (their
    version folders hold them), else ``trainer.default_root_dir`` (else the working folder). Only
    the first kind found counts: a recipe's default folder must not lend its checkpoints to a run
    logged elsewhere."""
    trainer = mapping(get(section, "trainer")) or {}
    callbacks, loggers = entries(trainer.get("callbacks")), entries(trainer.get("logger"))
    for folders in ([(init_args(cb) or {}).get("dirpath") for cb in callbacks],
                    [(init_args(lg) or {}).get("save_dir") for lg in loggers]):
        if any(folders):
            return [os.fspath(f) for f in dict.fromkeys(f for f in folders if f)]
    return [os.fspath(trainer.get("default_root_dir") or os.getcwd())]


def resolve_run_folder(config: Any) -> None:
    """``validate``/``test``/``predict --ckpt_path runs/x``: the run folder's best checkpoint
    (:func:`~biomoe.checkpoint.run_folder.resolve_checkpoint`), set in ``config`` (the whole parsed
    command, changed in place). Distributed checkpoints are folders too and stay as given."""
    subcommand = config.get("subcommand")
    ckpt = config[subcommand].get("ckpt_path") if subcommand in SCORING else None
    if isinstance(ckpt, (str, os.PathLike)) and os.path.isdir(ckpt):
        config[subcommand]["ckpt_path"] = resolve_checkpoint(ckpt)


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
