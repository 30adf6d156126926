"""What training, splitting and scoring read from a genome: the :class:`SequenceReader` protocol.

Windows, splits, per-genome metrics and baselines need only a few things from a genome: its
files (to name them in messages and metrics), its contigs (name, length, file) in a fixed order,
and the bases of a stretch of one contig. Any object with those members can be trained on;
:class:`~biomoe.data.sources.genome.Genome` (validated, indexed FASTA) is the reader biomoe ships, and
:mod:`biomoe.data.sources.registry` picks a reader for other file formats.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = ["ContigInfo", "Region", "SequenceReader", "contig_lookup", "reader_label", "total_length"]

Region = tuple[int, int, int]
"""(contig index, start, end): a half-open stretch of one contig that windows must lie in."""


@dataclass(frozen=True)
class ContigInfo:
    """One contig: its name, length and source file.

    When several files of a reader hold a contig of the same name, ``name`` is namespaced by the
    file (``<file label>#<record>``, as in the PanSN convention) and ``record`` keeps the name as
    written in the file.
    """

    name: str
    length: int
    path: Path
    record: str | None = None
    file_index: int = 0

    @property
    def record_name(self) -> str:
        """The name of the record inside its file."""
        return self.record or self.name


@runtime_checkable
class SequenceReader(Protocol):
    """Named contigs with random access, read from one or more files.

    Contigs are referred to by their index in :attr:`contigs` (windows, regions) or by name
    (users, messages). A reader is pickled to DataLoader worker processes, so it should open
    file handles lazily, per process.
    """

    paths: Sequence[Path]
    """The files read, in order; ``ContigInfo.file_index`` points into this list."""
    labels: Sequence[str]
    """One short, unique name per file, in the order of :attr:`paths`: how metrics
    (``val/<label>/bits_per_base``), ``data.val_files`` and ``data.file_weights`` name a file."""
    contigs: Sequence[ContigInfo]
    """Every contig, in a fixed order (it decides the order of the windows)."""

    def fetch(self, contig: str | int, start: int, end: int) -> str:
        """Bases ``[start, end)`` (0-based, half-open) of a contig given by name or index, case
        preserved; IndexError outside the contig."""
        ...


def reader_label(reader: SequenceReader) -> str:
    """The reader's files, as messages about the whole input name them."""
    return ", ".join(str(p) for p in reader.paths)


def contig_lookup(reader: SequenceReader) -> dict[str, int]:
    """Contig name -> index into ``reader.contigs``."""
    return {c.name: i for i, c in enumerate(reader.contigs)}


def total_length(reader: SequenceReader) -> int:
    """Bases over all contigs of the reader."""
    return sum(c.length for c in reader.contigs)
