"""Which reader opens a file: FASTA by default, other formats by registered file suffix.

``data.fasta`` names files; :func:`open_reader` opens them with the reader registered for their
suffix (``register_reader(".2bit", TwoBitReader)``, or the ``biomoe.readers`` entry-point group
of an installed package, so the command line can use a reader too) and with
:class:`~biomoe.data.sources.genome.Genome` otherwise. A folder holding a store manifest (``store.json``,
made by ``biomoe prepare``) is read by :class:`~biomoe.data.sources.store.StoreReader`; other folders are
read as FASTA folders.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from biomoe.data.sources.genome import Genome
from biomoe.data.sources.reader import SequenceReader
from biomoe.errors import GenomeInputError

__all__ = ["ENTRY_POINT_GROUP", "ReaderFactory", "open_reader", "register_reader", "registered_suffixes"]

ReaderFactory = Callable[[list[Path], "Path | None"], SequenceReader]
"""``factory(files, cache_dir)`` -> a reader over those files (``cache_dir``: where it may write
indexes or caches; None = its own choice)."""

ENTRY_POINT_GROUP = "biomoe.readers"
"""Entry points ``<suffix> = "package.module:factory"`` of installed packages, read on first use."""

_READERS: dict[str, ReaderFactory] = {}
_entry_points_loaded = False


def register_reader(suffixes: str | Sequence[str], factory: ReaderFactory) -> None:
    """Open files ending in any of ``suffixes`` (case-insensitive, e.g. ``".2bit"``) with ``factory``."""
    for suffix in [suffixes] if isinstance(suffixes, str) else suffixes:
        if not suffix.startswith("."):
            raise ValueError(f"reader suffix {suffix!r} must start with '.'")
        _READERS[suffix.lower()] = factory


def registered_suffixes() -> list[str]:
    """Suffixes with a reader other than FASTA."""
    _load_entry_points()
    return sorted(_READERS)


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        _READERS.setdefault(point.name.lower(), point.load())


def _open_store(paths: list[Path], cache_dir: Path | None) -> SequenceReader:
    """A prepared store (:mod:`biomoe.data.sources.store`): one store folder per reader."""
    from biomoe.data.sources.store import StoreReader  # imported when a store is read

    if len(paths) > 1:
        raise GenomeInputError(None, f"data.fasta: {paths[0]} and {paths[1]} are both stores; give one store "
                                     "(prepare several inputs into one)")
    return StoreReader(paths[0], cache_dir=cache_dir)


def _is_store(item: str | os.PathLike[str]) -> bool:
    from biomoe.data.sources.store import is_store

    return is_store(os.path.expanduser(os.fspath(item)))


def _factory_for(item: str | os.PathLike[str]) -> ReaderFactory | None:
    if _is_store(item):
        return _open_store
    name = os.fspath(item).lower()
    matches = [s for s in _READERS if name.endswith(s)]
    return _READERS[max(matches, key=len)] if matches else None


def open_reader(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
                cache_dir: str | os.PathLike[str] | None = None) -> SequenceReader:
    """A reader over ``paths``: the registered reader of their suffix, else FASTA
    (:class:`~biomoe.data.sources.genome.Genome`).

    All files must be of one format; a mix is one :class:`GenomeInputError` naming both kinds.
    """
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    _load_entry_points()
    factories = [None if os.path.isdir(item) and not _is_store(item) else _factory_for(item) for item in items]
    first_of_kind: dict[ReaderFactory | None, str | os.PathLike[str]] = {}
    for item, factory in zip(items, factories):
        first_of_kind.setdefault(factory, item)
    if len(first_of_kind) > 1:
        one, other = list(first_of_kind.values())[:2]
        raise GenomeInputError(None, f"data.fasta: {os.fspath(one)} and {os.fspath(other)} are of different "
                                     "formats; give files of one format")
    if factories and factories[0] is not None:
        return factories[0]([Path(p).expanduser() for p in items], None if cache_dir is None else Path(cache_dir))
    return Genome(paths, cache_dir=cache_dir)
