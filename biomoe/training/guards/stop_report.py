"""The one line that ends an interrupted ``fit``: what of the run was saved, and how to resume it.

Lightning handles Ctrl-C inside ``Trainer.fit`` (callbacks see it, then it exits), while the CLI's
``main`` prints the closing line. The callback that knows what was saved
(:class:`~biomoe.training.guards.preemption.SaveOnSigterm`) leaves its line here and ``main`` takes it;
this module imports nothing heavy, so ``main`` can ask it without importing Lightning.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence

__all__ = ["resume_command", "set_line", "take_line"]

_line: str | None = None


def set_line(line: str) -> None:
    """Remember the closing line of the run that is stopping (the last one set wins)."""
    global _line
    _line = line


def take_line() -> str | None:
    """The closing line set by the run that stopped, once (None when no run set one)."""
    global _line
    line, _line = _line, None
    return line


def program() -> str:
    """How the user started biomoe: ``python cli.py`` or the installed ``biomoe`` command."""
    started = sys.argv[0] if sys.argv and sys.argv[0] else "biomoe"
    return f"python {started}" if started.endswith(".py") else os.path.basename(started)


def resume_command(argv: Sequence[str], ckpt: str, command: str = "fit") -> str:
    """``argv`` (the command line after the program name) with ``--ckpt_path`` set to ``ckpt``:
    the exact command that continues the run from that checkpoint."""
    args = list(argv) or [command]
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--ckpt_path":
            skip = True
            continue
        if arg.startswith("--ckpt_path="):
            continue
        kept.append(arg)
    return f"{program()} {shlex.join([*kept, '--ckpt_path', ckpt])}"
