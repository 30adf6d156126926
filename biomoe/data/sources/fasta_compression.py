"""Which compression a FASTA file uses, and its decompressed bytes as a stream of chunks.

Users hand over plain FASTA, gzip from NCBI and bgzip from samtools; other compressors (bzip2,
xz, zstd, zip) are named in a one-line error instead of being read as garbage, and a bgzip file
cut short (it decompresses cleanly up to a block boundary) is told by its missing end-of-file block.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from biomoe.errors import GenomeInputError

__all__ = ["check_bgzf_eof", "iter_chunks", "sniff_compression"]

_CHUNK = 1 << 20
# The empty block bgzip writes last (SAM/BAM spec, 4.1.2); without it the file was cut short.
_BGZF_EOF = bytes.fromhex("1f8b08040000000000ff0600424302001b0003000000000000000000")
_OTHER_COMPRESSION = {b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd", b"PK\x03\x04": "zip"}


def sniff_compression(path: Path) -> str:
    """``"none"``, ``"gzip"`` or ``"bgzf"``, from the first bytes (not the name: ``.gz`` files are
    often bgzip and plain files are sometimes named ``.gz``); another compressor is one line naming it."""
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


def check_bgzf_eof(path: Path) -> None:
    """Raise unless a bgzip file ends in the empty block bgzip writes last."""
    with open(path, "rb") as fh:
        fh.seek(max(0, path.stat().st_size - len(_BGZF_EOF)))
        if fh.read() != _BGZF_EOF:
            raise GenomeInputError(path, "truncated bgzip file (the BGZF end-of-file marker is missing)")


def _open_bytes(path: Path, compression: str) -> BinaryIO:
    return gzip.open(path, "rb") if compression in ("gzip", "bgzf") else open(path, "rb")  # type: ignore[return-value]


def iter_chunks(path: Path, compression: str) -> Iterator[bytes]:
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
