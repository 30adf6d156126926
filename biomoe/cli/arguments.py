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

from biomoe.checkpoint.run_folder import resolve_checkpoint

__all__ = ["CommandParser", "add_device_option", "add_progress_option", "parse_model_command", "positive_int"]


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


def default_device() -> str:
    """``cuda`` where a CUDA device is usable, else ``cpu`` (torch imported only when a command's
    parser is built, not for ``cli.py --help``)."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def add_device_option(parser: argparse.ArgumentParser, help: str | None = "default %(default)s") -> None:
    """``--device`` of the commands that run a model: the GPU when there is one."""
    parser.add_argument("--device", default=default_device(), help=help)


def add_progress_option(parser: argparse.ArgumentParser) -> None:
    """``--no-progress``: the long commands show a progress bar on stderr unless asked not to."""
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def parse_model_command(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse the options of a command that runs a checkpoint (``ckpt``): a run folder given there
    becomes its best checkpoint, said once on stderr."""
    args = parser.parse_args(argv)
    args.ckpt = resolve_checkpoint(args.ckpt)
    return args
