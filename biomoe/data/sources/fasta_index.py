"""pyfaidx's ``.fai`` (and, for bgzip, ``.gzi``) index of a validated FASTA file, checked before use.

An index that does not describe the file sends reads to wrong offsets: pyfaidx then returns header
text, or another file's bases, as sequence. An existing ``<file>.fai`` next to the FASTA is used if
it matches the scanned lengths (and, where pyfaidx reads the file as it is, its offsets and line
widths); if it is stale or wrong it is rebuilt when we can write there, else a GenomeInputError
explains the problem. Without a ``.fai`` the index is built in the cache directory so data folders
stay clean.
"""

from __future__ import annotations

import contextlib
import os
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path

from biomoe.errors import GenomeInputError
from biomoe.files import atomic_path

__all__ = ["PreparedFile", "ensure_index"]


@dataclass
class PreparedFile:
    """A validated FASTA file as pyfaidx reads it, and what its index must say."""

    source: Path  # the user's file (named in errors and ContigInfo)
    readable: Path  # what pyfaidx opens: the source or the normalised cache copy
    fai: Path
    gzi: Path | None
    records: list[tuple[str, int]]
    layout: list[tuple[int, int, int]] | None = None  # expected .fai columns 3-5 when pyfaidx reads the source
    signature: tuple[int, int, int, int, int] | None = None  # file_signature(source) when it was validated


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


def _fai_matches(prep: PreparedFile) -> bool:
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


def ensure_index(prep: PreparedFile) -> None:
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


def _build_index(prep: PreparedFile) -> None:
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

