"""A prepared corpus store: ``.2bit`` shards, a JSON manifest, and the reader that trains on it.

Why this exists: a corpus of many FASTA files costs every DataLoader worker a validated, indexed
pyfaidx handle per file, and the bytes are 8 bits per base on disk. ``biomoe prepare`` (see
:mod:`biomoe.data.sources.store_prepare`) packs the files once into a folder of shards in the UCSC
``.2bit`` format (2 bits per base and N runs; soft-mask runs compressed beside each shard, or
inside it with ``--soft-mask twobit``) and a manifest, ``store.json``,
that records every input file (its label, metadata and split), every contig (length and
shard) and each shard's sha256. :class:`StoreReader` is the
:class:`~biomoe.data.sources.reader.SequenceReader` over it: windows are slices of memory-mapped shards,
mapped lazily in each worker process, with the bases, N and case exactly as in the FASTA.

Each shard's checksum is verified once: the verdict is kept in the cache folder under the
shard's path, size and mtime, so a later run (or a second rank) only stats the file. A shard
that does not match its manifest stops the run with one line naming the shard.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from biomoe.data.sources.cache import default_cache_dir
from biomoe.data.sources.reader import ContigInfo
from biomoe.data.sources.store_mask import MaskRuns
from biomoe.data.sources.store_twobit import Exceptions, TwoBitFile, lower_case
from biomoe.errors import GenomeInputError
from biomoe.data.sources.checksums import sha256_file
from biomoe.files import write_text

__all__ = ["FORMAT", "MANIFEST", "READABLE_VERSIONS", "VERSION", "StoreReader", "is_store", "read_store_manifest",
           "verify_shards"]

MANIFEST = "store.json"
"""The manifest's file name inside a store folder: a folder holding it is a store."""
FORMAT = "biomoe-sequence-store"
VERSION = 2
"""Version 2 may keep a shard's soft-mask runs in a compressed file beside it
(:mod:`~biomoe.data.sources.store_mask`)."""
READABLE_VERSIONS = (1, 2)


def is_store(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a store folder (or its manifest)."""
    path = Path(path)
    return (path.is_dir() and (path / MANIFEST).is_file()) or (path.name == MANIFEST and path.is_file())


def store_folder(path: str | os.PathLike[str]) -> Path:
    path = Path(path).expanduser()
    return path.parent if path.name == MANIFEST and path.is_file() else path


def read_store_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of the store at ``path``, checked for the fields a reader needs (one line
    naming the manifest otherwise)."""
    manifest = store_folder(path) / MANIFEST
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except OSError as exc:
        raise GenomeInputError(manifest, f"cannot read the store manifest ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise GenomeInputError(manifest, f"is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise GenomeInputError(manifest, f"is not a biomoe store manifest (format is not {FORMAT!r})")
    if data.get("version") not in READABLE_VERSIONS:
        raise GenomeInputError(manifest, f"store format version {data.get('version')!r}; this biomoe reads "
                                         f"versions {', '.join(map(str, READABLE_VERSIONS))}: prepare the store again")
    for key in ("files", "contigs", "shards"):
        if not isinstance(data.get(key), list):
            raise GenomeInputError(manifest, f"has no list {key!r}")
    return data


def _verified_marker(cache: Path, shard: Path, sha256: str) -> Path:
    st = shard.stat()
    key = f"{shard.resolve()}|{st.st_size}|{st.st_mtime_ns}|{sha256}"
    return cache / "store-verified" / hashlib.sha256(key.encode()).hexdigest()[:32]


def verify_shards(folder: Path, shards: Sequence[dict[str, Any]], cache_dir: Path | None) -> None:
    """Check every shard's size and sha256 against the manifest, hashing each shard only when no
    earlier check of the same file (path, size, mtime) is on record in the cache."""
    cache = cache_dir if cache_dir is not None else default_cache_dir(folder)
    for shard in shards:
        _verify_file(cache, folder / str(shard["file"]), int(shard["bytes"]), str(shard["sha256"]), "store shard")
        if shard.get("mask"):
            mask = shard["mask"]
            _verify_file(cache, folder / str(mask["file"]), int(mask["bytes"]), str(mask["sha256"]),
                         "store mask file")


def _verify_file(cache: Path, path: Path, size: int, sha256: str, what: str) -> None:
    if not path.is_file():
        raise GenomeInputError(path, f"{what} is missing")
    if path.stat().st_size != size:
        raise GenomeInputError(path, f"{what} is {path.stat().st_size:,} bytes, the manifest says {size:,}: it is "
                                     "damaged or was changed; prepare the store again")
    marker = _verified_marker(cache, path, sha256)
    if marker.is_file():
        return
    if sha256_file(path) != sha256:
        raise GenomeInputError(path, f"{what} does not match the sha256 in its manifest: it is damaged or "
                                     "was changed; prepare the store again")
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        write_text(marker, f"{path}\n")
    except (OSError, GenomeInputError):
        pass  # no cache: the next run checks again, nothing worse


@dataclass(frozen=True)
class _Place:
    shard: int
    record: int


class StoreReader:
    """The :class:`~biomoe.data.sources.reader.SequenceReader` over a prepared store (one folder).

    ``paths`` are the input files as they sit in the store (``<store>/<file name>``) and
    ``labels`` the labels they had as FASTA, so ``data.val_files``, ``data.test_files``,
    ``data.file_weights`` and per-genome metrics name files as they did; contigs keep their
    FASTA names and order, so windows and batches are those of the FASTA files.
    ``file_metadata[i]`` is what the manifest records for file ``i`` (species, strain, group, split).
    """

    def __init__(self, path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None,
                 verify: bool = True) -> None:
        self.folder = store_folder(path)
        manifest = read_store_manifest(self.folder)
        self.manifest_path = self.folder / MANIFEST
        files, shards = manifest["files"], manifest["shards"]
        names = [str(f["name"]) for f in files]
        unique = len(set(names)) == len(names)
        self.paths: list[Path] = [self.folder / (str(f["name"]) if unique else str(f["label"])) for f in files]
        self.labels: list[str] = [str(f["label"]) for f in files]
        self.file_metadata: list[dict[str, Any]] = [dict(f) for f in files]
        self.shard_paths = [self.folder / str(s["file"]) for s in shards]
        if verify:
            verify_shards(self.folder, shards, None if cache_dir is None else Path(cache_dir))
        self._shards = [TwoBitFile(p) for p in self.shard_paths]
        self._masks = {i: MaskRuns(self.folder / str(s["mask"]["file"])) for i, s in enumerate(shards) if s.get("mask")}
        record_of = [{name: i for i, name in enumerate(shard.names)} for shard in self._shards]
        self.contigs: list[ContigInfo] = []
        self._places: list[_Place] = []
        self._exceptions: dict[int, Exceptions] = {}
        for i, contig in enumerate(manifest["contigs"]):
            try:
                shard, file_index, name = int(contig["shard"]), int(contig["file"]), str(contig["name"])
                record = record_of[shard][name]
            except (KeyError, IndexError, ValueError, TypeError):
                raise GenomeInputError(self.manifest_path, f"contig entry {i} does not match the shards") from None
            self.contigs.append(ContigInfo(name, int(contig["length"]), self.paths[file_index],
                                           record=contig.get("record"), file_index=file_index))
            self._places.append(_Place(shard, record))
            if contig.get("iupac"):
                self._exceptions[i] = Exceptions.from_runs(contig["iupac"])
        self._index_of = {c.name: i for i, c in enumerate(self.contigs)}
        for i, contig in enumerate(self.contigs):
            place = self._places[i]
            if self._shards[place.shard].length(place.record) != contig.length:
                raise GenomeInputError(self.shard_paths[place.shard], f"contig {contig.name!r} has another length "
                                                                      "than the store manifest records")
        self.close()  # mapped again on first use, in each process

    def __repr__(self) -> str:
        bases = sum(c.length for c in self.contigs)
        return f"StoreReader({self.folder}: {len(self.contigs)} contigs, {bases:,} bp from {len(self.paths)} file(s))"

    def fetch(self, contig: str | int, start: int, end: int) -> str:
        """Bases ``[start, end)`` of a contig, case, N and IUPAC codes as in the FASTA it came from."""
        index = self._index_of[contig] if isinstance(contig, str) else int(contig)
        info = self.contigs[index]
        if not 0 <= start <= end <= info.length:
            raise IndexError(f"region {info.name}:{start}-{end} outside 0..{info.length}")
        place = self._places[index]
        shard = self._shards[place.shard]
        out = shard.fetch_bytes(place.record, start, end)
        exceptions = self._exceptions.get(index)
        if exceptions is not None:
            lo, hi = np.searchsorted(exceptions.positions, [start, end])
            if hi > lo:
                out[exceptions.positions[lo:hi] - start] = np.frombuffer(exceptions.letters, dtype=np.uint8)[lo:hi]
        if place.shard in self._masks:
            starts, ends = self._masks[place.shard].record(place.record)
            lower_case(out, starts, ends, start, end)
        else:
            shard.apply_mask(place.record, out, start, end)
        return out.tobytes().decode("ascii")

    def close(self) -> None:
        for shard in self._shards:
            shard.close()
        for mask in self._masks.values():
            mask.close()
