"""biomoe's warnings as ``biomoe: warning:`` lines, with repeats of one kind folded into a count.

A draft assembly has hundreds of contigs, and a check that warns about one contig (too short for a
window, no sequence, ...) would otherwise print one line per contig and push everything else off
the screen. Two warnings are of one *kind* when they differ only in their quoted names, numbers and
a leading file path (``train: skipping contig 'contig_2' (103 bp < seq_length 512)`` and
``... 'contig_7' (88 bp < ...)``). The first of a kind is printed when it happens; the others are
counted, and when the command ends one line says how many there were, how many bases they
concern (the sum of their ``N bp``) and the first few names. ``--verbose-warnings`` (or
``BIOMOE_VERBOSE_WARNINGS=1``) prints every one of them instead.

Other libraries' warnings that say nothing a user can act on are not printed at all
(:data:`QUIET_WARNINGS`, installed by :func:`quiet_known_noise` when a command starts): a line a
user must learn to ignore hides the ones that matter.
"""

from __future__ import annotations

import re
import sys
import warnings
from dataclasses import dataclass, field
from typing import TextIO

__all__ = ["QUIET_WARNINGS", "VERBOSE_OPTION", "VERBOSE_ENV", "WarningLines", "quiet_known_noise"]

VERBOSE_OPTION = "--verbose-warnings"
VERBOSE_ENV = "BIOMOE_VERBOSE_WARNINGS"
PREFIX = "biomoe: warning: "

# quoted names and numbers (1,024 or 0.5 or 12%) are what varies between warnings of one kind
_SLOT = re.compile(r"'[^']*'|\"[^\"]*\"|\d[\d,]*(?:\.\d+)?")
_BASES = re.compile(r"(\d[\d,]*) bp\b")
_LEADING_PATH = re.compile(r"^(\S*[/\\.]\S*): ")  # "data/x.fa: ..." (a split name such as "train: " is kept)
_NAMES_SHOWN = 3

QUIET_WARNINGS: tuple[str, ...] = (
    # biomoe passes argv to LightningCLI explicitly (``--debug`` removed); Lightning warns on every run.
    "LightningCLI's args parameter is intended",
    # Lightning's own use of a torch API deprecated in torch 2.13, once per fit.
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",
    # The EMA callback (biomoe.training.optimization.ema) on a model built in configure_model, as every biomoe
    # model is: the average is an unsharded copy by design, and the warning names nothing to change.
    r"You're using the WeightAveraging callback with a model that overrides the configure_model",
    # The model summary's size column under bf16-mixed; the kernels line says what computes in what.
    r"Precision \S+ is not supported by the model summary",
)
"""Start (``re.match``) of the messages of warnings that are never shown: each comes from
Lightning or torch, on every run or fit, and names nothing a user could change."""


def quiet_known_noise() -> None:
    """Ignore the warnings of :data:`QUIET_WARNINGS` from now on (``warnings.filterwarnings``)."""
    for message in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=message)


@dataclass
class _Kind:
    """The warnings of one kind seen so far."""

    first: str
    count: int = 0
    bases: int = 0
    has_bases: bool = False
    slots: list[list[str]] = field(default_factory=list)  # per slot, the value of every occurrence


def _parts(text: str) -> tuple[str, list[str]]:
    """(the kind: the text with its varying parts blanked, the varying parts in order)."""
    values: list[str] = []
    path = _LEADING_PATH.match(text)
    if path:
        values.append(path.group(1))
        text = "\0: " + text[path.end():]
    values.extend(match.group(0) for match in _SLOT.finditer(text))
    return _SLOT.sub("\0", text), values


class WarningLines:
    """Prints biomoe's warnings for one command, the repeats of each kind folded (module docstring).

    ``show`` prints (or counts) one warning; ``finish`` prints a line for every kind that repeated."""

    def __init__(self, verbose: bool = False) -> None:
        self.verbose = verbose
        self._kinds: dict[str, _Kind] = {}

    def show(self, message: str, file: TextIO | None = None) -> None:
        text = " ".join(str(message).split())
        key, values = _parts(text)
        kind = self._kinds.get(key)
        if kind is None:
            kind = self._kinds[key] = _Kind(first=text, slots=[[] for _ in values])
        kind.count += 1
        for slot, value in zip(kind.slots, values):
            slot.append(value)
        found = _BASES.findall(text)
        if found:
            kind.has_bases = True
            kind.bases += sum(int(n.replace(",", "")) for n in found)
        if self.verbose or kind.count == 1:
            print(PREFIX + text, file=file or sys.stderr)

    def summary_lines(self) -> list[str]:
        """One line for every kind that was seen more than once (and not printed in full)."""
        if self.verbose:
            return []
        return [PREFIX + _summary(key, kind) for key, kind in self._kinds.items() if kind.count > 1]

    def finish(self, file: TextIO | None = None) -> None:
        for line in self.summary_lines():
            print(line, file=file or sys.stderr)
        self._kinds.clear()


def _summary(key: str, kind: _Kind) -> str:
    """``<the message, varying parts as …>: 180 in all (contig_2, contig_5, contig_9, ...), 18,432 bp; ...``"""
    pieces = iter(key.split("\0"))
    text = next(pieces)
    names: list[str] | None = None
    for slot, rest in zip(kind.slots, pieces):
        distinct = list(dict.fromkeys(slot))
        if len(distinct) == 1:
            text += distinct[0]
        else:
            quoted = distinct[0][:1] in ("'", '"')
            text += "'…'" if quoted else "…"
            if names is None and (quoted or not distinct[0][:1].isdigit()):
                names = [value.strip("'\"") for value in distinct]
        text += rest
    listed = ""
    if names:
        more = ", ..." if len(names) > _NAMES_SHOWN else ""
        listed = f" ({', '.join(names[:_NAMES_SHOWN])}{more})"
    bases = f", {kind.bases:,} bp" if kind.has_bases else ""
    return (f"{text}: {kind.count:,} in all{listed}{bases}; only the first was shown "
            f"({VERBOSE_OPTION} shows each)")
