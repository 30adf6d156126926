"""The one grammar of biomoe's own subcommands, and the option spellings it replaced.

Every command that biomoe runs itself reads the same way::

    biomoe <command> [--ckpt_path CKPT | CKPT] INPUT ... --out OUTPUT [--kebab-case-option ...]

* inputs (FASTA files or folders, the checkpoint as a first positional) are positional; a second
  kind of input has a named option (``score-variants --variants``, ``score-fasta --repeat-fasta``);
* the file or folder written is ``--out`` (a figure beside it: ``--plot``, defaulting from ``--out``);
  a conversion of one input into one output (``export-hf CKPT OUT``, ``import-hf HF_DIR OUT``,
  ``recipes copy NAME DEST``) also takes it after its input, and ``--help`` shows that spelling;
* options are spelled with dashes (``--seq-length``), except ``--ckpt_path``, Lightning's own name for
  the checkpoint in fit/validate/test/predict (``--ckpt-path`` works too).

Spellings that earlier versions took (``routing --fasta``, ``--seq_length``, ``markov --json``) are
still accepted, hidden from ``--help``: :func:`add_option` adds them.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["CHECKPOINT_FIRST_COMMANDS", "add_option", "checkpoint_first", "merge_hidden_inputs"]

CHECKPOINT_FIRST_COMMANDS = ("validate", "test", "predict")
"""LightningCLI's commands that score a checkpoint: ``validate CKPT ...`` means ``--ckpt_path CKPT``."""


def add_option(parser: Any, flag: str, *old: str, **kwargs: Any) -> argparse.Action:
    """``parser.add_argument(flag, **kwargs)`` (a parser or an argument group), plus the old spellings ``old`` for the
    same value, hidden from ``--help`` (a command line written for an earlier version keeps working)."""
    action = parser.add_argument(flag, **kwargs)
    if old:
        hidden = {key: value for key, value in kwargs.items() if key not in ("required", "help", "default", "dest")}
        parser.add_argument(*old, dest=action.dest, help=argparse.SUPPRESS, default=argparse.SUPPRESS, **hidden)
    return action


def merge_hidden_inputs(args: argparse.Namespace, positional: str, old: str) -> None:
    """Inputs given with a hidden old option (``--fasta X``) join the positional list ``positional``."""
    extra = getattr(args, old, None) or []
    setattr(args, positional, [*(getattr(args, positional) or []), *extra])
    if hasattr(args, old):
        delattr(args, old)


def checkpoint_first(argv: list[str]) -> list[str]:
    """``validate CKPT --data.fasta G`` as ``validate --ckpt_path CKPT --data.fasta G``: the checkpoint
    as the first positional, as every other model command takes it (LightningCLI takes no
    positional arguments)."""
    if len(argv) > 1 and argv[0] in CHECKPOINT_FIRST_COMMANDS and not argv[1].startswith("-"):
        return [argv[0], "--ckpt_path", argv[1], *argv[2:]]
    return argv
