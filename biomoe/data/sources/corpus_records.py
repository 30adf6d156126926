"""Sequences of the corpus's source files: FASTA or GenBank, gzip, xz, bzip2 or plain.

Debian packages ship example genomes in whatever form their upstream chose (``.dna.gz``,
``.fna.xz``, GenBank flat files); the fetch and the sketches read them all through
:func:`read_records`, which tells the format by content rather than by name.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from biomoe.data.sources.corpus import CorpusError

__all__ = ["read_records"]


def _open_text(path: Path) -> IO[str]:
    """By content, not by name: Debian ships ``.dna.gz`` and ``.fna.xz`` as well as ``.fa.gz``."""
    with open(path, "rb") as handle:
        magic = handle.read(6)
    if magic[:2] == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="ascii", errors="replace")
    if magic[:6] == b"\xfd7zXZ\x00":
        return lzma.open(path, "rt", encoding="ascii", errors="replace")
    if magic[:3] == b"BZh":
        return bz2.open(path, "rt", encoding="ascii", errors="replace")
    return open(path, encoding="ascii", errors="replace")


def _fasta_records(handle: IO[str], first: str) -> Iterator[tuple[str, str]]:
    header, parts = first[1:].strip(), []
    for line in handle:
        if line.startswith(">"):
            yield header, "".join(parts)
            header, parts = line[1:].strip(), []
        else:
            parts.append(line.strip())
    yield header, "".join(parts)


def _genbank_records(handle: IO[str], first: str) -> Iterator[tuple[str, str]]:
    """GenBank flat files as (``ACCESSION.VERSION definition``, sequence); the annotation is
    not needed for pretraining and is dropped."""
    name, definition, parts, section = "", [], [], ""
    line = first
    while line:
        tag = line[:12].strip()
        if line.startswith("LOCUS"):
            name, definition, parts, section = line.split()[1], [], [], ""
        elif line.startswith("VERSION") and len(line.split()) > 1:
            name = line.split()[1]
        elif line.startswith("DEFINITION") or (section == "DEFINITION" and not tag):
            definition.append(line[12:].strip())
            section = "DEFINITION"
        elif line.startswith("ORIGIN"):
            section = "ORIGIN"
        elif line.startswith("//"):
            yield " ".join([name, *definition]).strip(), "".join(parts)
            section = ""
        elif section == "ORIGIN":
            parts.append("".join(line.split()[1:]))
        elif tag:
            section = tag
        line = handle.readline()


def read_records(path: str | Path) -> Iterator[tuple[str, str]]:
    """(header, sequence) of every record of a FASTA or GenBank file, compressed or not."""
    path = Path(path)
    with _open_text(path) as handle:
        first = handle.readline()
        while first and not first.strip():
            first = handle.readline()
        if first.startswith(">"):
            yield from _fasta_records(handle, first)
        elif first.startswith("LOCUS"):
            yield from _genbank_records(handle, first)
        else:
            raise CorpusError(f"{path}: neither FASTA nor GenBank (first line {first[:40]!r})")
