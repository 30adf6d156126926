"""The sha256 of a file, as the corpus manifest and a prepared store's manifest record it.

Both pin bytes by checksum (a fetched FASTA, a written shard) so that two machines get identical
files or stop with one line; files of any size are hashed in flat memory.
"""

from __future__ import annotations

import hashlib
import os

__all__ = ["sha256_file"]


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file's bytes, read in blocks (any size, flat memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()
