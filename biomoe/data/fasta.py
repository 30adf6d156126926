"""Validated, indexed random access to genome FASTA files.

Why this module exists: training reads millions of random windows, so we need
indexed access (pyfaidx ``.fai``), and users hand us all sorts of FASTA (gzip from
NCBI, bgzip from samtools, Windows line endings, soft-masked lowercase, typos). Every
problem must surface as a one-line :class:`~biomoe.errors.GenomeInputError` naming
the file, *before* a training job starts, instead of as a pyfaidx traceback an hour in.

Pipeline for each file:

1. **Scan** (one streaming pass over 1 MiB chunks, ``bytes.translate`` to find bad
   characters; an E. coli genome takes well under a second). It validates the content
   and records every contig's name and length. The result is cached as JSON, keyed by
   the file's path, size, mtime, ctime, inode and a hash of its first and last 64 KiB, so
   reopening an unchanged file skips the scan while an edit in place (even one that restores
   size and mtime) is scanned again.
2. **Normalise if needed**. pyfaidx can index plain FASTA and bgzip (BGZF), but not
   plain gzip, and it rejects CRLF line endings, blank lines and ragged line widths.
   Such files are decompressed/rewritten *once* into a plain FASTA in the cache
   directory (written to a temporary file, then ``os.replace``'d so a crash or a
   concurrent process never sees a half-written file). Sequence content, including
   lowercase soft-masking, is preserved exactly.
3. **Index**. An existing ``<file>.fai`` next to the FASTA is used if it matches the
   scanned lengths; if it is stale or wrong it is rebuilt when we can write there, else
   a GenomeInputError explains the problem. Without a ``.fai`` the index is built in the
   cache directory so data folders stay clean.

The cache directory defaults to ``.biomoe_cache/`` next to the FASTA file when that
folder is writable, else ``~/.cache/biomoe`` (``$XDG_CACHE_HOME/biomoe``); pass
``cache_dir`` to choose. Deleting it is always safe.

pyfaidx handles are opened lazily and per process: a :class:`Genome` can be pickled
and sent to DataLoader workers, and each worker opens its own file handles (sharing
a file offset across ``fork`` would corrupt reads).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import struct
import warnings
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from biomoe.data.reader import ContigInfo
from biomoe.errors import GenomeInputError
from biomoe.files import atomic_path, atomic_write, write_text

__all__ = [
    "FASTA_SUFFIXES",
    "ContigInfo",
    "FileScan",
    "Genome",
    "default_cache_dir",
    "file_labels",
    "resolve_fasta_paths",
    "scan_fasta",
]

FASTA_SUFFIXES: tuple[str, ...] = (".fa", ".fasta", ".fna", ".fa.gz", ".fasta.gz", ".fna.gz")
_SCAN_VERSION = 3  # bump when the scan cache format or the normalisation changes
_CHUNK = 1 << 20
_WRAP = 80
_IUPAC = b"ACGTNRYSWKMBDHV"
_VALID = _IUPAC + _IUPAC.lower()
_VALID_LUT = np.zeros(256, dtype=bool)
_VALID_LUT[np.frombuffer(_VALID, dtype=np.uint8)] = True
# One-letter amino-acid codes (and X, *, the stop) that no nucleotide code uses: a line of
# letters holding them is a protein sequence given where DNA is read.
_PROTEIN_ONLY = frozenset(b"EFILPQXZJO*efilpqxzjo")
_PROTEIN_LETTERS = frozenset(b"ACDEFGHIKLMNPQRSTVWYXBZJOU*acdefghiklmnpqrstvwyxbzjou")


def _protein_hint(piece: bytes) -> str:
    """``; it looks like a protein ...`` when the line is amino-acid letters, a tenth of them or more
    ones no nucleotide code uses; else empty (a stray character in DNA gets no such guess)."""
    letters = set(piece)
    only = sum(piece.count(bytes([code])) for code in letters & _PROTEIN_ONLY)
    # in proteins E, F, I, L, P and Q are about a third of the residues; one stray letter is a typo
    if not letters <= _PROTEIN_LETTERS or len(letters & _PROTEIN_ONLY) < 2 or only < 0.1 * len(piece):
        return ""
    return ("; this looks like a protein (amino-acid) sequence: biomoe reads nucleotide FASTA "
            "(A, C, G, T and IUPAC codes such as N)")
# The empty block bgzip writes last (SAM/BAM spec, 4.1.2); without it the file was cut short.
_BGZF_EOF = bytes.fromhex("1f8b08040000000000ff0600424302001b0003000000000000000000")
_OTHER_COMPRESSION = {b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd", b"PK\x03\x04": "zip"}


def file_labels(paths: Sequence[Path]) -> list[str]:
    """One short, unique label per file: its name without FASTA suffixes (``ecoli_536.fna.gz``
    -> ``ecoli_536``), or the whole name, then the path, where that would repeat. Labels name
    genomes in metrics (``val/<label>/bits_per_base``) and namespace repeated contig names."""
    def stem(path: Path) -> str:
        name = path.name
        for suffix in sorted(FASTA_SUFFIXES, key=len, reverse=True):
            if name.lower().endswith(suffix):
                return name[: -len(suffix)] or name
        return name

    for rule in (stem, lambda p: p.name, str):
        labels = [rule(Path(p)) for p in paths]
        if len(set(labels)) == len(labels):
            return labels
    return [f"{label}.{i}" for i, label in enumerate(labels)]


@dataclass
class FileScan:
    """What the validating scan learned about one file (cached as JSON)."""

    compression: str  # "none", "gzip" or "bgzf"
    canonical: bool  # True if pyfaidx can index the file as it is
    records: list[tuple[str, int]] = field(default_factory=list)
    # Per record, where a ``.fai`` must point for this file as it is: (offset of the first base,
    # bases per line, bytes per line). Used to tell a stale index whose lengths still agree.
    layout: list[tuple[int, int, int]] = field(default_factory=list)
    # Records with a header and no sequence (an assembler's or a download's leftovers): not contigs.
    empty: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------
# Path handling
# ---------------------------------------------------------------------------------------
def resolve_fasta_paths(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Expand files and folders into a list of readable FASTA files.

    A folder contributes all ``*.fa, *.fasta, *.fna`` (optionally ``.gz``) files in it,
    sorted by name, so the contig order (and hence window order) is reproducible.
    """
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not items:
        raise GenomeInputError(None, "no FASTA path given")
    files: list[Path] = []
    for item in items:
        path = Path(item).expanduser()
        if not path.exists():
            raise GenomeInputError(path, "no such file or directory")
        if not os.access(path, os.R_OK):
            raise GenomeInputError(path, "permission denied (not readable)")
        if path.is_dir():
            found = _usable_folder_entries(path)
            if not found:
                raise GenomeInputError(path, f"folder contains no FASTA files ({', '.join(FASTA_SUFFIXES)})")
            files.extend(found)
        else:
            files.append(path)
    return _each_file_once(files)


def _each_file_once(files: list[Path]) -> list[Path]:
    """The same file named twice (listed twice, through a symlink, or also found in a listed folder)
    would be trained on twice and its contigs namespaced against themselves: it is used once, at
    its first place, with a warning naming both spellings."""
    first: dict[Path, Path] = {}
    kept: list[Path] = []
    for path in files:
        real = path.resolve()
        if real in first:
            shown = "" if first[real] == path else f" as {first[real]}"
            warnings.warn(f"{path}: listed again (already given{shown}); the file is used once", stacklevel=3)
            continue
        first[real] = path
        kept.append(path)
    return kept


def _usable_folder_entries(folder: Path) -> list[Path]:
    """The folder's FASTA files, sorted; entries named like FASTA that cannot be read (a dangling
    symlink, a sub-folder, no read permission) are skipped with a warning naming each, so a
    genome missing from the training set is never missed silently."""
    found: list[Path] = []
    others: list[str] = []
    for entry in sorted(folder.iterdir()):
        if not entry.name.lower().endswith(FASTA_SUFFIXES):
            # hidden entries (biomoe's own cache) and FASTA indexes belong beside genomes
            if not entry.name.startswith(".") and not entry.name.lower().endswith(_COMPANION_SUFFIXES):
                others.append(entry.name)
            continue
        if entry.is_symlink() and not entry.exists():
            problem = f"dangling symlink (to {os.readlink(entry)})"
        elif not entry.is_file():
            problem = "not a regular file"
        elif not os.access(entry, os.R_OK):
            problem = "permission denied (not readable)"
        else:
            found.append(entry)
            continue
        warnings.warn(f"{entry}: {problem}; skipped, the other FASTA files of {folder} are used", stacklevel=3)
    if others:
        more = f" (+{len(others) - 3} more)" if len(others) > 3 else ""
        warnings.warn(f"{folder}: skipped {len(others)} file(s) not named like FASTA ({', '.join(others[:3])}{more}); "
                      f"FASTA files end in {', '.join(FASTA_SUFFIXES[:4])} ...", stacklevel=3)
    return found


_COMPANION_SUFFIXES = (".fai", ".gzi", ".md5", ".sha256")
"""Files that accompany a FASTA file in a genome folder and are not worth a warning."""


def default_cache_dir(path: Path) -> Path:
    """``.biomoe_cache/`` next to ``path`` if that folder is writable, else the user cache."""
    parent = path.resolve().parent
    local = parent / ".biomoe_cache"
    if (local.is_dir() and os.access(local, os.W_OK)) or (not local.exists() and os.access(parent, os.W_OK)):
        return local
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "biomoe"


_FINGERPRINT_BYTES = 1 << 16


def file_signature(path: Path) -> tuple[int, int, int, int, int]:
    """(device, inode, size, mtime, ctime): what changes when a file is rewritten, replaced or
    truncated. The inode change time is in it because ``touch -r`` can restore an mtime but
    nothing restores a ctime (a chmod changes it too: a false alarm is a stop, never wrong data)."""
    st = path.stat()
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _cache_key(path: Path) -> str:
    """Scan-cache key: path, size, mtime, and also what an in-place edit that restores size and
    mtime (``touch -r``) cannot restore: the inode change time, the inode, and a hash of the first
    and last 64 KiB. A false miss only costs a rescan; a false hit would train on stale data."""
    st = path.stat()
    digest = hashlib.sha1()
    try:
        with open(path, "rb") as handle:
            digest.update(handle.read(_FINGERPRINT_BYTES))
            if st.st_size > 2 * _FINGERPRINT_BYTES:
                handle.seek(st.st_size - _FINGERPRINT_BYTES)
            digest.update(handle.read(_FINGERPRINT_BYTES))
    except PermissionError:
        raise GenomeInputError(path, "permission denied (not readable)") from None
    ident = (f"{_SCAN_VERSION}|{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_dev}|"
             f"{st.st_ino}|{digest.hexdigest()}")
    return hashlib.sha1(ident.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------
# Reading raw bytes
# ---------------------------------------------------------------------------------------
def _sniff_compression(path: Path) -> str:
    with open(path, "rb") as fh:
        head = fh.read(18)
    if head[:2] == b"\x1f\x8b":
        # BGZF = gzip member with FEXTRA flag and a 'BC' subfield (SAM/BAM spec, 4.1).
        if len(head) >= 14 and head[3] & 4 and head[12:14] == b"BC":
            return "bgzf"
        return "gzip"
    for magic, name in _OTHER_COMPRESSION.items():
        if head.startswith(magic):
            raise GenomeInputError(path, f"file is {name}-compressed; only plain, gzip or bgzip FASTA is supported")
    return "none"


def _open_bytes(path: Path, compression: str) -> BinaryIO:
    return gzip.open(path, "rb") if compression in ("gzip", "bgzf") else open(path, "rb")  # type: ignore[return-value]


def _iter_chunks(path: Path, compression: str) -> Iterator[bytes]:
    """Yield decompressed chunks; a chunk never ends in the middle of ``\\r\\n``."""
    try:
        with _open_bytes(path, compression) as fh:
            while True:
                chunk = fh.read(_CHUNK)
                if not chunk:
                    return
                if chunk.endswith(b"\r"):
                    chunk += fh.read(1)
                yield chunk
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise GenomeInputError(path, f"corrupted gzip data ({exc})") from None
    except PermissionError:
        raise GenomeInputError(path, "permission denied (not readable)") from None


# ---------------------------------------------------------------------------------------
# Validating scan
# ---------------------------------------------------------------------------------------
class _Scanner:
    """Streaming FASTA validator: a small state machine fed with byte chunks."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records: list[tuple[str, int]] = []
        self.canonical = True
        self.seen_header = False
        self.at_line_start = True
        self.in_header = False
        self.header = bytearray()
        self.line_no = 1
        self.name = ""
        self.length = 0
        self.line_len = 0  # length of the (possibly partial) current sequence line
        self.width = 0  # first line width of the current record
        self.short_line_seen = False
        self.pos = 0  # bytes (decompressed) consumed before the current piece
        self.offset = 0  # byte offset of the current record's first base
        self.line_bytes = 0  # bytes per line of the current record's first line (with newline)
        self.layout: list[tuple[int, int, int]] = []
        self.empty: list[str] = []

    def fail(self, problem: str) -> GenomeInputError:
        return GenomeInputError(self.path, problem)

    def feed(self, chunk: bytes, first: bool) -> None:
        if first:
            self._check_first_chunk(chunk)
        pieces = chunk.split(b"\n")
        last = len(pieces) - 1
        for i, piece in enumerate(pieces):
            complete = i < last
            end = self.pos + len(piece) + complete
            if self.at_line_start and piece[:1] == b">":
                self.in_header = True
            if self.in_header:
                self.header += piece
                if complete:
                    self._start_record(end)
            else:
                self._sequence_piece(piece, complete)
            self.pos = end
            if complete or piece:  # a chunk ending in "\n" leaves an empty last piece: still at a line start
                self.at_line_start = complete
            if complete:
                self.line_no += 1

    def _check_first_chunk(self, chunk: bytes) -> None:
        if chunk.startswith(b"\xef\xbb\xbf"):
            raise self.fail("starts with a UTF-8 byte-order mark (BOM); save it without one (plain ASCII FASTA)")
        head = chunk[:4096]
        non_text = head.translate(None, bytes(range(32, 127)) + b"\t\r\n\x0b\x0c")
        if b"\x00" in head or len(non_text) > len(head) // 10:
            raise self.fail("not a FASTA file (binary content)")
        stripped = chunk.lstrip()
        if stripped.startswith(b"@"):
            raise self.fail("looks like FASTQ (starts with '@'); a FASTA file is needed")
        if stripped and not stripped.startswith(b">"):
            raise self.fail("not a FASTA file (first line does not start with '>')")

    def _cr_error(self) -> GenomeInputError:
        return self.fail(
            f"line {self.line_no:,} contains a carriage return (CR) that does not end the line: "
            "old Mac (CR-only) line endings? Convert them to LF, e.g. with: tr '\\r' '\\n'"
        )

    def _start_record(self, offset: int) -> None:
        self._finish_record()
        raw = bytes(self.header[1:]).rstrip(b"\r")
        self.header.clear()
        self.in_header = False
        if b"\r" in raw:
            raise self._cr_error()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(
                f"record header on line {self.line_no:,} is not valid UTF-8 text "
                f"(byte 0x{raw[exc.start]:02x} at column {exc.start + 2})"
            ) from None
        if text != text.strip():
            self.canonical = False
        words = text.split()
        if not words:
            raise self.fail(f"record header on line {self.line_no:,} has no name")
        self.seen_header = True
        self.name = words[0]
        self.offset = offset
        self.length = self.width = self.line_len = self.line_bytes = 0
        self.short_line_seen = False

    def _sequence_piece(self, piece: bytes, complete: bool) -> None:
        if complete and piece.endswith(b"\r"):
            piece = piece[:-1]
            self.canonical = False
        if piece:
            if not self.seen_header:
                raise self.fail("not a FASTA file (sequence before the first '>' header)")
            bad = piece.translate(None, _VALID)
            if bad:
                if b"\r" in bad:
                    raise self._cr_error()
                idx = int(np.argmin(_VALID_LUT[np.frombuffer(piece, dtype=np.uint8)]))
                char = chr(piece[idx])
                shown = repr(char) if char.isprintable() else f"0x{piece[idx]:02x}"
                raise self.fail(
                    f"contig '{self.name}' has character {shown} outside IUPAC at position "
                    f"{self.length + idx + 1:,} (line {self.line_no:,}){_protein_hint(piece)}"
                )
            self.length += len(piece)
            self.line_len += len(piece)
        if complete:
            self._end_line(terminated=True)

    def _end_line(self, terminated: bool) -> None:
        n = self.line_len
        self.line_len = 0
        if n == 0:
            self.canonical = False  # blank line: pyfaidx rejects them
            return
        if self.width == 0:
            self.width = n
            self.line_bytes = n + terminated  # as pyfaidx/samtools write it
        elif self.short_line_seen or n > self.width:
            self.canonical = False
        if n < self.width:
            self.short_line_seen = True

    def _finish_record(self) -> None:
        if not self.seen_header:
            return
        if self.length == 0:
            self.empty.append(self.name)  # skipped, with a warning naming it (see _prepare_file)
            return
        self.records.append((self.name, self.length))
        self.layout.append((self.offset, self.width, self.line_bytes))

    def close(self) -> list[tuple[str, int]]:
        if self.in_header:  # header on the last line without a newline
            self._start_record(self.pos)
        elif self.line_len:
            self._end_line(terminated=False)
        self._finish_record()
        if not self.records:
            if self.empty:
                raise self.fail(f"no record has sequence ({_listed(self.empty)} {'is' if len(self.empty) == 1 else 'are'} "
                                "headers only)")
            raise self.fail("file is empty (no FASTA records)")
        seen: set[str] = set()
        for name in [name for name, _ in self.records] + self.empty:
            if name in seen:
                raise self.fail(f"duplicate contig name '{name}'")
            seen.add(name)
        return self.records


def scan_fasta(path: Path) -> FileScan:
    """Validate one FASTA file in a single streaming pass and list its records.

    Raises GenomeInputError for: empty files, binary/FASTQ/non-FASTA text, headers
    without a name, files whose records all lack sequence, duplicate names within the file, characters
    outside the IUPAC nucleotide codes (with contig and 1-based position) and corrupted
    gzip streams. CRLF line endings, blank lines and lowercase are accepted; a record with no
    sequence is left out of ``records`` and listed in ``empty``.
    """
    path = Path(path)
    try:
        if path.stat().st_size == 0:
            raise GenomeInputError(path, "file is empty")
    except PermissionError:
        raise GenomeInputError(path, "permission denied (not readable)") from None
    compression = _sniff_compression(path)
    if compression == "bgzf":
        with open(path, "rb") as fh:
            fh.seek(max(0, path.stat().st_size - len(_BGZF_EOF)))
            if fh.read() != _BGZF_EOF:
                raise GenomeInputError(path, "truncated bgzip file (the BGZF end-of-file marker is missing)")
    scanner = _Scanner(path)
    first = True
    for chunk in _iter_chunks(path, compression):
        scanner.feed(chunk, first)
        first = False
    if first:
        raise GenomeInputError(path, "file is empty (no data after decompression)")
    records = scanner.close()
    return FileScan(compression=compression, canonical=scanner.canonical and compression != "gzip", records=records,
                    layout=scanner.layout, empty=scanner.empty)


def _listed(names: list[str], shown: int = 3) -> str:
    """``'a', 'b', 'c' (+2 more)``: a list of names short enough for one line."""
    more = f" (+{len(names) - shown} more)" if len(names) > shown else ""
    return ", ".join(f"'{n}'" for n in names[:shown]) + more


def _write_normalised(src: Path, compression: str, dest: Path) -> None:
    """Rewrite ``src`` as plain FASTA (LF endings, 80 bases per line), atomically."""
    with atomic_write(dest, "wb") as out:
        buf = bytearray()
        carry = b""
        for chunk in _iter_chunks(src, compression):
            lines = (carry + chunk).split(b"\n")
            carry = lines.pop()
            for line in lines:
                _emit_line(line, buf, out)
        if carry:
            _emit_line(carry, buf, out)
        if buf:
            out.write(bytes(buf) + b"\n")


def _emit_line(line: bytes, buf: bytearray, out: BinaryIO) -> None:
    line = line.rstrip(b"\r")
    if line.startswith(b">"):
        if buf:
            out.write(bytes(buf) + b"\n")
            buf.clear()
        out.write(line.strip() + b"\n")
        return
    buf += line.strip()
    full = len(buf) - len(buf) % _WRAP
    if full:
        view = bytes(buf[:full])
        out.write(b"".join(view[i : i + _WRAP] + b"\n" for i in range(0, full, _WRAP)))
        del buf[:full]


def _atomic_write_text(dest: Path, text: str) -> None:
    write_text(dest, text)


# ---------------------------------------------------------------------------------------
# Per-file preparation: scan (cached), normalise (cached), index
# ---------------------------------------------------------------------------------------
@dataclass
class _PreparedFile:
    source: Path  # the user's file (named in errors and ContigInfo)
    readable: Path  # what pyfaidx opens: the source or the normalised cache copy
    fai: Path
    gzi: Path | None
    records: list[tuple[str, int]]
    layout: list[tuple[int, int, int]] | None = None  # expected .fai columns 3-5 when pyfaidx reads the source
    signature: tuple[int, int, int, int, int] | None = None  # file_signature(source) when it was validated


_ANNOUNCED_CACHES: set[Path] = set()


def _say_new_cache(cache: Path) -> None:
    """A folder appearing beside a user's genomes is said once, with what it holds."""
    if cache.exists() or cache in _ANNOUNCED_CACHES:
        return
    _ANNOUNCED_CACHES.add(cache)
    # stdout, beside the command's other reports: stderr stays one line when the input is bad
    print(f"biomoe: note: FASTA indexes and scans are cached in {cache} (safe to delete)")


def _prepare_file(path: Path, cache_dir: Path | None) -> _PreparedFile:
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir(path)
    _say_new_cache(cache)
    signature = file_signature(path)  # before reading: a change from here on is caught by fetch
    key = _cache_key(path)
    stem = f"{path.name}.{key}"
    scan_json = cache / f"{stem}.scan.json"
    scan = _load_scan(scan_json)
    if scan is None:
        scan = scan_fasta(path)
        try:
            payload = {"compression": scan.compression, "canonical": scan.canonical, "records": scan.records,
                       "layout": scan.layout, "empty": scan.empty}
            _atomic_write_text(scan_json, json.dumps(payload))
        except (OSError, GenomeInputError) as exc:
            warnings.warn(f"{path}: cannot write scan cache to {cache} ({exc}); will rescan next time", stacklevel=3)
    if scan.empty:  # said on every run, cached scan or not: the genome in training lacks these names
        warnings.warn(f"{path}: skipped {len(scan.empty)} record(s) with no sequence ({_listed(scan.empty)})",
                      stacklevel=3)

    if scan.canonical:
        readable = path
        beside = Path(str(path) + ".fai")
        fai = beside if beside.exists() else cache / f"{stem}.fai"
        gzi: Path | None = None
        if scan.compression == "bgzf":
            beside_gzi = Path(str(path) + ".gzi")
            gzi = beside_gzi if beside_gzi.exists() and beside.exists() else cache / f"{stem}.gzi"
    else:
        readable = cache / f"{stem}.fa"
        if not readable.exists():
            try:
                _write_normalised(path, scan.compression, readable)
            except (OSError, GenomeInputError) as exc:
                raise GenomeInputError(path, f"needs a normalised copy but cache dir {cache} is not writable ({exc})") from None
        fai = Path(str(readable) + ".fai")
        gzi = None
    layout = scan.layout if scan.canonical and len(scan.layout) == len(scan.records) else None
    prepared = _PreparedFile(path, readable, fai, gzi, scan.records, layout, signature)
    _ensure_index(prepared)
    return prepared


def _load_scan(scan_json: Path) -> FileScan | None:
    try:
        data = json.loads(scan_json.read_text())
        return FileScan(data["compression"], bool(data["canonical"]), [(str(n), int(l)) for n, l in data["records"]],
                        [(int(o), int(b), int(w)) for o, b, w in data["layout"]],
                        [str(n) for n in data.get("empty", [])])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _read_fai(fai: Path) -> dict[str, tuple[int, ...]] | None:
    """``name -> (length, offset, line bases, line bytes)`` from a ``.fai``; None if unreadable."""
    try:
        rows: dict[str, tuple[int, ...]] = {}
        for line in fai.read_text().splitlines():
            if line.strip():
                cols = line.split("\t")
                rows[cols[0]] = tuple(int(c) for c in cols[1:5])
        return rows
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return None


def _read_fai_lengths(fai: Path) -> dict[str, int] | None:
    rows = _read_fai(fai)
    # pyfaidx lists a record with no sequence at length 0; the scan leaves it out of the contigs
    return None if rows is None else {name: cols[0] for name, cols in rows.items() if cols and cols[0]}


def _fai_matches(prep: _PreparedFile) -> bool:
    """Whether an existing index describes the file: lengths, and where the source is read directly,
    also offsets and line widths (a header edited or lines rewrapped keep the lengths)."""
    if prep.layout is None:
        return _read_fai_lengths(prep.fai) == dict(prep.records)
    rows = _read_fai(prep.fai)
    rows = None if rows is None else {name: cols for name, cols in rows.items() if cols and cols[0]}
    if rows is None or len(rows) != len(prep.records):
        return False
    for (name, length), (offset, bases, line_bytes) in zip(prep.records, prep.layout):
        row = rows.get(name)
        if row is None or row[:3] != (length, offset, bases):
            return False
        # A record on a single line is never read across a line end, so its bytes per line are unused:
        # samtools counts a newline there even when the file ends without one, pyfaidx does not.
        if row[3:] != (line_bytes,) and not (bases == length and row[3:] == (bases + 1,)):
            return False
    return True


def _bgzf_blocks(path: Path) -> list[tuple[int, int]] | None:
    """(compressed offset, uncompressed offset) of every BGZF block, from the block headers
    (``BSIZE``) and trailers (``ISIZE``) alone; None if the file is not a well-formed BGZF."""
    blocks: list[tuple[int, int]] = []
    size = path.stat().st_size
    offset = plain = 0
    with open(path, "rb") as handle:
        while offset < size:
            handle.seek(offset)
            head = handle.read(12)
            if len(head) < 12 or head[:4] != b"\x1f\x8b\x08\x04":
                return None
            extra = handle.read(int.from_bytes(head[10:12], "little"))
            bsize, i = None, 0
            while i + 4 <= len(extra):  # subfields: SI1 SI2 SLEN data
                length = int.from_bytes(extra[i + 2:i + 4], "little")
                if extra[i:i + 2] == b"BC" and length == 2:
                    bsize = int.from_bytes(extra[i + 4:i + 6], "little")
                i += 4 + length
            if bsize is None or offset + bsize + 1 > size:
                return None
            handle.seek(offset + bsize + 1 - 4)
            blocks.append((offset, plain))
            plain += int.from_bytes(handle.read(4), "little")
            offset += bsize + 1
    return blocks


def _gzi_matches(bgzf: Path, gzi: Path) -> bool:
    """Whether a ``.gzi`` lists exactly the file's block starts (htslib's format: a count, then
    (compressed, uncompressed) offset pairs for every block but the first; the empty end-of-file
    block may be listed or not). A ``.gzi`` of another file sends reads to wrong offsets."""
    try:
        data = gzi.read_bytes()
        blocks = _bgzf_blocks(bgzf)
    except OSError:
        return False
    if blocks is None or len(data) < 8:
        return False
    count = struct.unpack_from("<Q", data)[0]
    if len(data) != 8 + 16 * count:
        return False
    listed = [struct.unpack_from("<QQ", data, 8 + 16 * i) for i in range(count)]
    expected = blocks[1:]
    return listed == expected or listed == expected[:-1]


def _ensure_index(prep: _PreparedFile) -> None:
    """Make sure ``prep.fai`` (and ``.gzi``) exist and agree with the scanned file."""
    expected = dict(prep.records)
    if prep.fai.exists():
        fresh = prep.fai.stat().st_mtime_ns >= prep.readable.stat().st_mtime_ns
        matches = _fai_matches(prep)
        gzi_ok = prep.gzi is None or (prep.gzi.exists() and _gzi_matches(prep.readable, prep.gzi))
        if matches and gzi_ok and (fresh or not os.access(prep.fai.parent, os.W_OK)):
            return
        if not os.access(prep.fai.parent, os.W_OK):
            stale = prep.fai if not matches else prep.gzi
            raise GenomeInputError(
                prep.source, f"index {stale} does not match the FASTA and cannot be rebuilt (folder not writable)"
            )
        if not (matches and gzi_ok):  # an index of another file, or damaged: replacing it is said
            stale = ", ".join(str(i) for i, ok in ((prep.fai, matches), (prep.gzi, gzi_ok)) if i is not None and not ok)
            warnings.warn(f"{prep.source}: index {stale} did not match the file; rebuilt", stacklevel=4)
    _build_index(prep)
    if prep.gzi is not None and not _gzi_matches(prep.readable, prep.gzi):
        raise GenomeInputError(prep.source, f"bgzip index {prep.gzi} disagrees with the file's BGZF blocks")
    if _read_fai_lengths(prep.fai) != expected:
        raise GenomeInputError(prep.source, f"pyfaidx index {prep.fai} disagrees with the file contents")


def _build_index(prep: _PreparedFile) -> None:
    """Build the pyfaidx index into temporary names, then rename them into place.

    Atomic (:func:`biomoe.files.atomic_path`) so that several processes (e.g. DDP ranks) opening
    the same genome never read a half-written index.
    """
    import pyfaidx  # imported here: only to index or read a file; every command's --help imports this module

    try:
        with contextlib.ExitStack() as stack:
            # pyfaidx reads an existing .gzi instead of writing one: hand it names not yet taken
            tmp_fai = stack.enter_context(atomic_path(prep.fai, create=False))
            kwargs: dict[str, object] = {"indexname": str(tmp_fai), "rebuild": True, "build_index": True}
            if prep.gzi is not None:
                kwargs["gzi_indexname"] = str(stack.enter_context(atomic_path(prep.gzi, create=False)))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fa = pyfaidx.Fasta(str(prep.readable), **kwargs)  # type: ignore[arg-type]
            fa.close()
    except GenomeInputError as exc:  # the folder cannot take the index
        raise GenomeInputError(prep.source, f"cannot write index {prep.fai} ({exc.problem})") from None
    except OSError as exc:
        raise GenomeInputError(prep.source, f"cannot write index {prep.fai} ({exc})") from None
    except Exception as exc:  # pyfaidx.FastaIndexingError and friends
        raise GenomeInputError(prep.source, f"pyfaidx cannot index the file ({exc})") from None


# ---------------------------------------------------------------------------------------
# Genome
# ---------------------------------------------------------------------------------------
class Genome:
    """A set of FASTA files viewed as one genome: named contigs with random access (the FASTA
    :class:`~biomoe.data.reader.SequenceReader`).

    ``Genome(paths, cache_dir=None)`` accepts a file, a folder (all FASTA files in it,
    sorted) or a list of both; files may be plain, gzip or bgzip. Opening validates
    every file (cached per path, size, times, inode and content fingerprint; see the module
    docstring) and raises :class:`GenomeInputError` for any problem. Plain gzip files are
    decompressed once into the cache directory, because pyfaidx can only seek in bgzip files.
    A file that changes while it is read (truncated, rewritten, replaced) stops the next read
    with a GenomeInputError naming it.

    A contig name that occurs in several files (assemblers name contigs ``contig_1``,
    ``contig_2``, ... in every genome) is namespaced by file label: ``a#contig_1`` and
    ``b#contig_1`` (:func:`file_labels`; the PanSN ``sample#contig`` convention), with a
    warning. Names inside one file must still be unique.
    """

    def __init__(
        self,
        paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.paths = resolve_fasta_paths(paths)
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        self._files = [_prepare_file(p, self.cache_dir) for p in self.paths]
        self.labels: list[str] = file_labels(self.paths)
        """One label per file (see :func:`file_labels`), in the order of :attr:`paths`."""
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
            shown = ", ".join(f"'{n}'" for n in repeated[:3]) + (f" (+{len(repeated) - 3} more)" if len(repeated) > 3 else "")
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
        (one ``stat`` per read, about 2 µs beside the read's 5)."""
        prep = self._files[file_index]
        if prep.signature is None:
            return
        try:
            now = file_signature(prep.source)
        except OSError:
            raise GenomeInputError(prep.source, "was removed or became unreadable while biomoe was reading it") from None
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
