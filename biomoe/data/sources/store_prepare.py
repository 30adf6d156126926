"""Building a corpus store (:mod:`biomoe.data.sources.store`) from FASTA files, folders or a corpus manifest.

The inputs are opened as training opens them (:class:`~biomoe.data.sources.genome.Genome`: validated,
gzip/bgzip read, repeated contig names namespaced ``<file>#<name>``), so the store holds the same
files, labels, contigs and bases in the same order, and training on it gives the same windows.
A corpus manifest (``data/corpus.tsv``) stands for its files in the fetched corpus folder, in
the order a FASTA folder lists them, with each file's species, strain, group and split recorded.

Everything is written into a temporary folder beside ``out`` that is renamed to ``out`` only when
complete: a run that is stopped leaves nothing under the store's name, and of two runs started
at once the second to finish keeps the first one's store (if it is the same) and discards its own.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from biomoe.data.sources.corpus import read_manifest
from biomoe.data.sources.corpus_splits import read_splits
from biomoe.data.sources.fasta_paths import resolve_fasta_paths
from biomoe.data.sources.genome import Genome
from biomoe.data.sources.checksums import sha256_file
from biomoe.data.sources.store import FORMAT, MANIFEST, VERSION, is_store, read_store_manifest, verify_shards
from biomoe.data.sources.store_mask import encode_mask_runs, without_mask
from biomoe.data.sources.store_twobit import EncodedRecord, RecordEncoder, iter_pieces, write_twobit
from biomoe.errors import GenomeInputError
from biomoe.output_checks import check_not_input, protect_inputs
from biomoe.temporaries import TEMP_MARK, sweep_stale_temps

__all__ = ["DEFAULT_SHARD_BASES", "SOFT_MASK_PLACES", "PrepareResult", "prepare_store", "resolve_inputs"]

DEFAULT_SHARD_BASES = 1 << 28
"""Bases per shard before a new one starts (about 64 MiB of ``.2bit``): few enough files for a
large corpus, small enough to copy or re-check one at a time. Files are never split across shards."""

SOFT_MASK_PLACES = ("compact", "twobit")
"""Where soft-mask (lowercase) runs go: ``compact``, a deflated run table beside each shard (about
2.5 bytes a run, see :mod:`~biomoe.data.sources.store_mask`); ``twobit``, inside the ``.2bit`` (8 bytes a run,
and UCSC tools then show the case too)."""

_PIECE = 1 << 24  # bases read from the FASTA at once: bounds memory for any chromosome


@dataclass
class Inputs:
    """The FASTA files to store, and what is known about each (by file name)."""

    items: list[Path] = field(default_factory=list)
    metadata: dict[str, dict[str, str]] = field(default_factory=dict)
    expected_sha256: dict[str, str] = field(default_factory=dict)
    splits: dict[str, str] = field(default_factory=dict)


@dataclass
class PrepareResult:
    out: Path
    files: int
    contigs: int
    bases: int
    bytes: int
    created: bool

    @property
    def bytes_per_base(self) -> float:
        return self.bytes / max(self.bases, 1)


def default_corpus_dir(manifest: Path) -> Path:
    """Where ``make data-corpus`` writes the files of a manifest in ``data/``: ``data/large/corpus``."""
    return manifest.resolve().parent / "large" / "corpus"


def resolve_inputs(inputs: Sequence[str | os.PathLike[str]], splits_file: Path | None = None,
                   corpus_dir: Path | None = None) -> Inputs:
    """FASTA files and folders as given; a ``.tsv`` corpus manifest as its files (sorted by name,
    as a folder of them is read) with their metadata, and the splits file beside it."""
    found = Inputs()
    for item in inputs:
        path = Path(item).expanduser()
        if path.suffix.lower() != ".tsv" or not path.is_file():
            found.items.append(path)
            continue
        entries = sorted(read_manifest(path), key=lambda e: e.file)
        folder = corpus_dir if corpus_dir is not None else default_corpus_dir(path)
        for entry in entries:
            file = folder / entry.file
            if not file.is_file():
                raise GenomeInputError(file, f"listed in {path} but not found (run `make data-corpus`, or give "
                                             "--corpus-dir)")
            found.items.append(file)
            found.metadata[entry.file] = {"species": entry.species, "strain": entry.strain, "group": entry.group}
            if entry.sha256:
                found.expected_sha256[entry.file] = entry.sha256
        beside = path.parent / "corpus-splits.tsv"
        if splits_file is None and beside.is_file():
            found.splits.update(_splits(beside))
    if splits_file is not None:
        found.splits.update(_splits(splits_file))
    return found


def _splits(path: Path) -> dict[str, str]:
    try:
        return read_splits(path)
    except (OSError, KeyError) as exc:
        raise GenomeInputError(path, f"cannot read the split file ({exc})") from None


class _HashingWriter:
    """A binary handle that hashes what goes through it (the shard's sha256 without a re-read)."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.digest = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.handle.write(data)


def _write_shard(path: Path, records: list[EncodedRecord]) -> tuple[int, str]:
    with open(path, "wb") as handle:
        writer = _HashingWriter(handle)
        size = write_twobit(writer, records)  # type: ignore[arg-type]
        handle.flush()
        os.fsync(handle.fileno())
    return size, writer.digest.hexdigest()


def _write_bytes(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _signature(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """What decides whether a store is still the store of these inputs: each file's path, size, mtime."""
    out = []
    for path in paths:
        st = path.stat()
        out.append({"path": str(path.resolve()), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns})
    return out


def _check_out(out: Path, inputs: Sequence[Path]) -> None:
    for item in inputs:
        check_not_input(out, [item])
        if item.resolve().is_relative_to(out.resolve()):
            raise GenomeInputError(out, f"holds the input {item}; biomoe never writes over an input: "
                                        "choose another --out")


def prepare_store(inputs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], *,
                  splits_file: Path | None = None, keep_splits: Sequence[str] | None = None,
                  corpus_dir: Path | None = None, shard_bases: int = DEFAULT_SHARD_BASES,
                  cache_dir: Path | None = None, soft_mask: str = "compact",
                  say: Callable[[str], None] = print) -> PrepareResult:
    """Pack ``inputs`` into a store at ``out`` (see the module docstring).

    An ``out`` that exists and is not empty is refused, unless it is the store these inputs and
    options make, already complete: then it is checked (shard checksums) and kept as it is."""
    out = Path(out).expanduser()
    found = resolve_inputs(inputs, splits_file, corpus_dir)
    paths = resolve_fasta_paths(found.items)
    _check_out(out, paths)
    if keep_splits:
        missing = [p.name for p in paths if p.name not in found.splits]
        if missing:
            raise GenomeInputError(missing[0], "has no recorded split (give --splits FILE, or leave out --split)")
        paths = [p for p in paths if found.splits[p.name] in keep_splits]
        if not paths:
            raise GenomeInputError(None, f"--split {' '.join(keep_splits)}: no input file is in that split")
    if soft_mask not in SOFT_MASK_PLACES:
        raise GenomeInputError(None, f"--soft-mask {soft_mask}: choose one of {', '.join(SOFT_MASK_PLACES)}")
    options = {"shard_bases": int(shard_bases), "splits": sorted(keep_splits or []), "soft_mask": soft_mask}
    signature = _signature(paths)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        return _existing(out, signature, options)
    protect_inputs(paths)
    size = sum(p.stat().st_size for p in paths)
    say(f"checking {len(paths)} FASTA file{'s' if len(paths) != 1 else ''} ({size:,} bytes)")
    genome = Genome(paths, cache_dir=cache_dir)  # validated as training validates it
    return _build(genome, found, out, signature, options, shard_bases, say)


def _existing(out: Path, signature: list[dict[str, Any]], options: dict[str, Any]) -> PrepareResult:
    if not is_store(out):
        raise GenomeInputError(out, "exists and is not empty; give a new or empty folder as --out")
    manifest = read_store_manifest(out)
    made = manifest.get("prepared_from", {})
    if made.get("inputs") != signature or made.get("options") != options:
        raise GenomeInputError(out, "is a store of other inputs or options; give a new or empty folder as --out "
                                    "(or delete this store)")
    verify_shards(out, manifest["shards"], None)
    total = int(manifest["bytes"]) + (out / MANIFEST).stat().st_size
    return PrepareResult(out, len(manifest["files"]), len(manifest["contigs"]), int(manifest["bases"]), total,
                         created=False)


def _build(genome: Genome, found: Inputs, out: Path, signature: list[dict[str, Any]],
           options: dict[str, Any], shard_bases: int, say: Callable[[str], None]) -> PrepareResult:
    out.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale_temps(out)  # a killed earlier run's half-written store
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}{TEMP_MARK}{os.getpid()}-", dir=out.parent))
    try:
        manifest = _write_store(genome, found, work, shard_bases, options["soft_mask"] == "compact", say)
        manifest["prepared_from"] = {"inputs": signature, "options": options}
        data = json.dumps(manifest, indent=1) + "\n"
        with open(work / MANIFEST, "w", encoding="utf-8") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(work, 0o777 & ~_umask())
        published = _publish(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    if not published:  # another run finished first: its store stands if it is this one
        shutil.rmtree(work, ignore_errors=True)
        result = _existing(out, signature, options)
        say(f"{out}: another prepare run finished this store first; it is kept and this run's copy discarded")
        return result
    total = manifest["bytes"] + len(data.encode())
    return PrepareResult(out, len(manifest["files"]), len(manifest["contigs"]), manifest["bases"], total, created=True)


def _publish(work: Path, out: Path) -> bool:
    """Rename the complete store in ``work`` to ``out`` (absent or an empty folder, which the rename
    replaces atomically); False when ``out`` is no longer empty: a run started at the same time
    renamed its store there first."""
    try:
        os.rename(work, out)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False
        raise
    return True


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write_store(genome: Genome, found: Inputs, work: Path, shard_bases: int, compact_mask: bool,
                 say: Callable[[str], None]) -> dict[str, Any]:
    contigs_of: dict[int, list[int]] = {}
    for index, contig in enumerate(genome.contigs):
        contigs_of.setdefault(contig.file_index, []).append(index)
    files: list[dict[str, Any]] = []
    contigs: list[dict[str, Any]] = []
    shards: list[dict[str, Any]] = []
    pending: list[EncodedRecord] = []
    pending_bases = 0

    def flush() -> None:
        nonlocal pending, pending_bases
        if not pending:
            return
        name = f"shard-{len(shards):05d}.2bit"
        entry: dict[str, Any] = {"file": name}
        if compact_mask:
            mask_name = f"shard-{len(shards):05d}.mask.npz"
            data = encode_mask_runs(pending)
            _write_bytes(work / mask_name, data)
            entry["mask"] = {"file": mask_name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                             "runs": int(sum(len(r.mask_starts) for r in pending))}
            pending = [without_mask(r) for r in pending]
        size, sha = _write_shard(work / name, pending)
        entry.update({"bytes": size, "sha256": sha, "bases": pending_bases, "contigs": len(pending)})
        shards.append(entry)
        pending, pending_bases = [], 0

    for file_index, path in enumerate(genome.paths):
        number = file_index + 1
        members = contigs_of.get(file_index, [])
        bases = sum(genome.contigs[i].length for i in members)
        if pending and pending_bases + bases > shard_bases:
            flush()
        sha = sha256_file(path)
        expected = found.expected_sha256.get(path.name)
        if expected and expected != sha:
            raise GenomeInputError(path, f"sha256 differs from the corpus manifest ({expected[:16]}..., file "
                                         f"{sha[:16]}...): fetch the corpus again")
        entry: dict[str, Any] = {"label": genome.labels[file_index], "name": path.name, "source": str(path),
                                 "bytes": path.stat().st_size, "sha256": sha, "bases": bases, "contigs": len(members)}
        entry.update(found.metadata.get(path.name, {}))
        if path.name in found.splits:
            entry["split"] = found.splits[path.name]
        files.append(entry)
        for index in members:
            info = genome.contigs[index]
            encoder = RecordEncoder(info.name)
            for start, end in iter_pieces(info.length, _PIECE):
                encoder.add(genome.fetch(index, start, end))
            record = encoder.finish()
            row: dict[str, Any] = {"name": info.name, "file": len(files) - 1, "length": info.length,
                                   "shard": len(shards)}
            if info.record is not None:
                row["record"] = info.record
            if len(record.exceptions.positions):
                row["iupac"] = record.exceptions.runs()
            contigs.append(row)
            pending.append(record)
            pending_bases += info.length
        say(f"[{number}/{len(genome.paths)}] {path.name}: {len(members)} contig{'s' if len(members) != 1 else ''}, "
            f"{bases:,} bp -> shard-{len(shards):05d}.2bit")
    flush()
    total_bases = sum(f["bases"] for f in files)
    total_bytes = sum(s["bytes"] + (s["mask"]["bytes"] if "mask" in s else 0) for s in shards)
    return {"format": FORMAT, "version": VERSION, "created_by": "biomoe prepare", "bases": total_bases,
            "bytes": total_bytes, "files": files, "contigs": contigs, "shards": shards}
