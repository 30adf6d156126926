"""Errors raised for bad user input.

The CLI catches :class:`GenomeInputError` and prints only its message (exit code 2),
so the message must be a single line that names the offending file and the problem,
e.g. ``data/x.fa: contig 'chr2' has character 'J' outside IUPAC at position 1,204``.
A traceback would bury that in noise; a user with a broken FASTA only needs that line.
"""

from __future__ import annotations

import os

__all__ = ["ConfigError", "GenomeInputError"]


class ConfigError(ValueError):
    """An invalid configuration; the message is one line that says what to change."""


class GenomeInputError(ValueError):
    """A genome file (or the set of files) cannot be used as training data.

    Subclasses ``ValueError`` so generic callers that already handle bad values keep
    working. Newlines in the message are collapsed so it always prints as one line.
    """

    def __init__(self, path: str | os.PathLike[str] | None, problem: str) -> None:
        self.path = None if path is None else os.fspath(path)
        self.problem = " ".join(str(problem).split())
        message = self.problem if self.path is None else f"{self.path}: {self.problem}"
        super().__init__(message)
