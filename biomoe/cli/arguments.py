"""The argument parser of biomoe's own subcommands (score-fasta, generate, embed, ...).

argparse answers a bad option with its usage block and exits; biomoe answers every bad input
with one line. :class:`CommandParser` turns argument errors into ``ArgumentError``, which
``biomoe.cli.main.main`` prints as ``biomoe: error: <command>: <problem> (see --help)`` with
exit code 2, the same report a wrong ``fit`` option gets. ``--help`` is unchanged.
Argument types that several commands share (:func:`positive_int`) are here too.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

__all__ = ["CommandParser", "positive_int"]


class CommandParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line, raised rather than printed."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.split()[-1] if self.prog else "biomoe"
        message = " ".join(message.split())
        if not message.startswith(f"{command}: "):  # argparse re-reports an ArgumentError it caught
            message = f"{command}: {message}"
        raise argparse.ArgumentError(None, message)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value
