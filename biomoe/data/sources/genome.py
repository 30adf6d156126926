"""Validated, indexed random access to genome FASTA files: :class:`Genome`, the FASTA reader.

Why this module exists: training reads millions of random windows, so we need indexed access
(pyfaidx ``.fai``), and users hand us all sorts of FASTA (gzip from NCBI, bgzip from samtools,
Windows line endings, soft-masked lowercase, typos). Every problem must surface as a one-line
:class:`~biomoe.errors.GenomeInputError` naming the file, *before* a training job starts, instead
of as a pyfaidx traceback an hour in. Each file is validated, normalised if needed and indexed by
:func:`~biomoe.data.sources.fasta_prepare.prepare_file`.

pyfaidx handles are opened lazily and per process: a :class:`Genome` can be pickled
and sent to DataLoader workers, and each worker opens its own file handles (sharing
a file offset across ``fork`` would corrupt reads).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path

from biomoe.data.sources.cache import file_signature
from biomoe.data.sources.fasta_paths import file_labels, resolve_fasta_paths
from biomoe.data.sources.fasta_prepare import prepare_file
from biomoe.data.sources.reader import ContigInfo
from biomoe.errors import GenomeInputError

__all__ = ["Genome"]


class Genome:
    """A set of FASTA files viewed as one genome: named contigs with random access (the FASTA
    :class:`~biomoe.data.sources.reader.SequenceReader`).

    ``Genome(paths, cache_dir=None)`` accepts a file, a folder (all FASTA files in it,
    sorted) or a list of both; files may be plain, gzip or bgzip. Opening validates
    every file (cached per path, size, times, inode and content fingerprint; see
    :mod:`~biomoe.data.sources.fasta_prepare`) and raises :class:`GenomeInputError` for any
    problem. Plain gzip files are decompressed once into the cache directory, because pyfaidx
    can only seek in bgzip files.
    A file that changes while it is read (truncated, rewritten, replaced) stops the next read
    with a GenomeInputError naming it.

    A contig name that occurs in several files (assemblers name contigs ``contig_1``,
    ``contig_2``, ... in every genome) is namespaced by file label: ``a#contig_1`` and
    ``b#contig_1`` (:func:`~biomoe.data.sources.fasta_paths.file_labels`; the PanSN
    ``sample#contig`` convention), with a warning. Names inside one file must still be unique.
    """

    def __init__(
        self,
        paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.paths = resolve_fasta_paths(paths)
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        self._files = [prepare_file(p, self.cache_dir) for p in self.paths]
        self.labels: list[str] = file_labels(self.paths)
        """One label per file (see :func:`~biomoe.data.sources.fasta_paths.file_labels`), in the order of
        :attr:`paths`."""
        self.contigs: list[ContigInfo] = []
        files_with: dict[str, int] = {}
        for prep in self._files:
            for name, _ in prep.records:
                files_with[name] = files_with.get(name, 0) + 1
        repeated = [name for name, count in files_with.items() if count > 1]
        for file_index, prep in enumerate(self._files):
            for name, length in prep.records:
                if files_with[name] > 1:
                    self.contigs.append(ContigInfo(f"{self.labels[file_index]}#{name}", length, prep.source,
                                                   record=name, file_index=file_index))
                else:
                    self.contigs.append(ContigInfo(name, length, prep.source, file_index=file_index))
        if repeated:
            shown = ", ".join(f"'{n}'" for n in repeated[:3])
            shown += f" (+{len(repeated) - 3} more)" if len(repeated) > 3 else ""
            example = next(c.name for c in self.contigs if c.record == repeated[0])
            warnings.warn(f"contig name {shown} occurs in several FASTA files; such contigs are named "
                          f"'<file>#<name>', e.g. '{example}'", stacklevel=2)
        self._index_of = {c.name: i for i, c in enumerate(self.contigs)}
        self._handles: dict[int, object] = {}
        self._pid = os.getpid()

    # -- metadata ---------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [c.name for c in self.contigs]

    @property
    def total_length(self) -> int:
        return sum(c.length for c in self.contigs)

    def __len__(self) -> int:
        """Total number of bases over all contigs."""
        return self.total_length

    def __contains__(self, name: object) -> bool:
        return name in self._index_of

    def contig(self, key: str | int) -> ContigInfo:
        """ContigInfo by name or by index into :attr:`contigs`."""
        if isinstance(key, str):
            if key not in self._index_of:
                raise KeyError(f"unknown contig '{key}'")
            return self.contigs[self._index_of[key]]
        return self.contigs[key]

    def index_of(self, name: str) -> int:
        return self._index_of[name]

    # -- sequence access --------------------------------------------------------------
    def fetch(self, contig: str | int, start: int, end: int) -> str:
        """Bases ``[start, end)`` (0-based, half-open) of a contig, case preserved."""
        info = self.contig(contig)
        if not 0 <= start <= end <= info.length:
            raise IndexError(f"region {info.name}:{start}-{end} outside 0..{info.length}")
        if start == end:
            return ""
        fasta = self._handle(info.file_index)
        self._check_unchanged(info.file_index)
        try:
            bases = str(fasta[info.record_name][start:end])  # type: ignore[index]
        except Exception:
            self._check_unchanged(info.file_index)  # a file cut short fails here: name it
            raise
        if len(bases) != end - start:
            self._check_unchanged(info.file_index)
            raise GenomeInputError(self._files[info.file_index].source,
                                   f"read {len(bases):,} bases for {info.name}:{start}-{end} instead of "
                                   f"{end - start:,}: the file no longer matches its index")
        return bases

    def _check_unchanged(self, file_index: int) -> None:
        """Stop with one line if a FASTA file was rewritten, replaced or truncated since it was
        validated: windows read from it now would no longer be the genome that was checked
        (one ``stat`` per read, cheap beside the read itself)."""
        prep = self._files[file_index]
        if prep.signature is None:
            return
        try:
            now = file_signature(prep.source)
        except OSError:
            raise GenomeInputError(prep.source,
                                   "was removed or became unreadable while biomoe was reading it") from None
        if now != prep.signature:
            what = (f"size {prep.signature[2]:,} -> {now[2]:,} bytes" if now[2] != prep.signature[2] else
                    "replaced by another file" if now[:2] != prep.signature[:2] else
                    "modified in place" if now[3] != prep.signature[3] else
                    "its inode changed: content, permissions or links")
            raise GenomeInputError(prep.source, f"changed while biomoe was reading it ({what}); windows read from "
                                                "it would not be the genome that was validated: restart the run")

    def _handle(self, file_index: int) -> object:
        """pyfaidx handle for this process; reopened after fork so offsets aren't shared."""
        if self._pid != os.getpid():
            self._handles = {}
            self._pid = os.getpid()
        handle = self._handles.get(file_index)
        if handle is None:
            import pyfaidx  # imported here: keeps start-up (--help) fast

            prep = self._files[file_index]
            kwargs: dict[str, object] = {
                "indexname": str(prep.fai),
                "as_raw": True,
                "sequence_always_upper": False,
                "rebuild": False,
                "build_index": False,
            }
            if prep.gzi is not None:
                kwargs["gzi_indexname"] = str(prep.gzi)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # stale-mtime warning; lengths were checked
                handle = pyfaidx.Fasta(str(prep.readable), **kwargs)  # type: ignore[arg-type]
            self._handles[file_index] = handle
        return handle

    def close(self) -> None:
        """Close file handles (they are reopened on the next fetch)."""
        for handle in self._handles.values():
            handle.close()  # type: ignore[attr-defined]
        self._handles = {}

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_handles"] = {}
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._pid = os.getpid()

    def __repr__(self) -> str:
        return f"Genome({len(self.contigs)} contigs, {self.total_length:,} bp from {len(self.paths)} file(s))"
