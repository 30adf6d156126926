"""Where biomoe keeps what it derives from input files, and how a cached result is tied to its file.

The cache directory defaults to ``.biomoe_cache/`` next to the input file when that folder is
writable, else ``~/.cache/biomoe`` (``$XDG_CACHE_HOME/biomoe``); pass ``cache_dir`` to choose.
Deleting it is always safe. A FASTA file's scan is cached as JSON, keyed by the file's path, size,
mtime, ctime, inode and a hash of its first and last 64 KiB, so reopening an unchanged file skips
the scan while an edit in place (even one that restores size and mtime) is scanned again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from biomoe.data.sources.fasta_scan import FileScan
from biomoe.errors import GenomeInputError
from biomoe.files import write_text

__all__ = ["cache_key", "default_cache_dir", "file_signature", "load_scan", "save_scan", "say_new_cache"]

_SCAN_VERSION = 3  # bump when the scan cache format or the normalisation changes


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


def cache_key(path: Path) -> str:
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


def load_scan(scan_json: Path) -> FileScan | None:
    try:
        data = json.loads(scan_json.read_text())
        return FileScan(data["compression"], bool(data["canonical"]),
                        [(str(n), int(length)) for n, length in data["records"]],
                        [(int(o), int(b), int(w)) for o, b, w in data["layout"]],
                        [str(n) for n in data.get("empty", [])])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_scan(scan_json: Path, scan: FileScan) -> None:
    """Write a scan where :func:`load_scan` finds it (atomically: a concurrent reader never sees
    half a file); OSError or GenomeInputError when the cache cannot be written."""
    payload = {"compression": scan.compression, "canonical": scan.canonical, "records": scan.records,
               "layout": scan.layout, "empty": scan.empty}
    write_text(scan_json, json.dumps(payload))


_ANNOUNCED_CACHES: set[Path] = set()


def say_new_cache(cache: Path) -> None:
    """A folder appearing beside a user's genomes is said once, with what it holds."""
    if cache.exists() or cache in _ANNOUNCED_CACHES:
        return
    _ANNOUNCED_CACHES.add(cache)
    # stdout, beside the command's other reports: stderr stays one line when the input is bad
    print(f"biomoe: note: FASTA indexes and scans are cached in {cache} (safe to delete)")
