"""What a store holds, in one checksum: so a resumed run can tell a store rebuilt at the same path.

A store's manifest records the sha256 of every input file and of every shard (and soft-mask file)
it wrote. :func:`store_checksum` folds those into one digest that changes whenever the bases, the
files or their splits do, and stays the same for the same data prepared again elsewhere (paths,
times and options are left out). Training records the digest of each store it reads in its
checkpoints (the data module's state), and ``fit --ckpt_path last`` compares it with the store that
is at the path now.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from biomoe.data.sources.store import is_store, read_store_manifest

__all__ = ["STATE_KEY", "data_checksums", "store_checksum"]

STATE_KEY = "store_checksums"
"""The key of ``{store path: checksum}`` in the data module's checkpoint state."""


def store_checksum(manifest: Mapping[str, Any]) -> str:
    """sha256 over the checksums a store manifest records: its files (label, sha256, split) and its
    shards (sha256, and the soft-mask file's)."""
    held = {"files": [[f.get("label"), f.get("sha256"), f.get("split")] for f in manifest["files"]],
            "shards": [[s.get("sha256"), (s.get("mask") or {}).get("sha256")] for s in manifest["shards"]]}
    return hashlib.sha256(json.dumps(held, sort_keys=True).encode("utf-8")).hexdigest()


def _items(fasta: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None) -> list[str]:
    if fasta is None:
        return []
    return [os.fspath(fasta)] if isinstance(fasta, (str, os.PathLike)) else [os.fspath(item) for item in fasta]


def data_checksums(fasta: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None) -> dict[str, str]:
    """``{absolute path: checksum}`` of each store among the data sources ``fasta`` names (FASTA
    files are not stores and are left out)."""
    found = {}
    for item in _items(fasta):
        path = os.path.expanduser(item)
        if is_store(path):
            found[os.path.normpath(os.path.abspath(path))] = store_checksum(read_store_manifest(path))
    return found
