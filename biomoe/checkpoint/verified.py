"""Checkpoint files already verified, so that every command does not read every byte again.

Checking a checkpoint's CRCs and that every weight is finite reads the whole file: about a second
per few GB, paid by each inference command on a file that has not changed since the last one.
A file that passed is recorded here by what identifies its bytes (real path, size, modification
and status-change times in ns, inode and device); the next check of a file with the same record
skips the reading checks (:func:`~biomoe.checkpoint.verify.verify_checkpoint` still checks
structure and shapes, which cost nothing). Anything that rewrites the file changes its record:
a new inode when it is replaced, a new mtime and ctime when it is written in place (``ctime``
cannot be set back, unlike ``mtime``).

As git does with its index, a file modified within :data:`RACY_SECONDS` of its check is not
recorded: file times tick coarsely, so a write in the same tick as the check could leave the
same record behind different bytes.

The records live in the user's cache folder (``$XDG_CACHE_HOME/biomoe/verified-checkpoints.json``,
else ``~/.cache/biomoe/...``); ``BIOMOE_VERIFY_CACHE=0`` turns them off. A record that cannot be
read or written costs the full check, never a skipped one.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

__all__ = ["RACY_SECONDS", "cache_file", "file_stamp", "is_verified", "record_verified"]

CHECKS_VERSION = 1
"""Raised when the reading checks change: records of older checks no longer count."""

RACY_SECONDS = 2.0
"""A file modified less than this before its check started is checked again next time."""

MAX_RECORDS = 256
"""The oldest records are dropped beyond this many (the file stays a few tens of KB)."""


def cache_file() -> Path | None:
    """Where the records are kept; None when ``BIOMOE_VERIFY_CACHE=0``."""
    if os.environ.get("BIOMOE_VERIFY_CACHE", "1") == "0":
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "biomoe" / "verified-checkpoints.json"


def file_stamp(path: str | os.PathLike[str]) -> dict[str, int | str] | None:
    """What identifies the bytes of ``path`` (None when it cannot be stat'ed)."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return None
    return {"path": real, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
            "inode": st.st_ino, "device": st.st_dev, "checks": CHECKS_VERSION}


def _records(where: Path) -> list[dict]:
    with contextlib.suppress(OSError, ValueError):
        loaded = json.loads(where.read_text(encoding="utf-8"))
        if isinstance(loaded, list):
            return [r for r in loaded if isinstance(r, dict)]
    return []


def is_verified(stamp: dict[str, int | str] | None) -> bool:
    """True when a file with exactly this stamp passed the reading checks before."""
    where = cache_file()
    if stamp is None or where is None:
        return False
    return stamp in _records(where)


def record_verified(stamp: dict[str, int | str] | None, started: float) -> None:
    """Record that the file of ``stamp`` passed, if it still has that stamp and was not modified
    within :data:`RACY_SECONDS` of ``started`` (``time.time()`` when its check began)."""
    where = cache_file()
    if stamp is None or where is None or file_stamp(str(stamp["path"])) != stamp:
        return
    if max(int(stamp["mtime_ns"]), int(stamp["ctime_ns"])) / 1e9 > started - RACY_SECONDS:
        return
    from biomoe.files import atomic_write  # only on a first check

    records = [r for r in _records(where) if r.get("path") != stamp["path"]] + [stamp]
    with contextlib.suppress(Exception):  # a cache folder we cannot write is a cache we do not use
        with atomic_write(where) as handle:
            json.dump(records[-MAX_RECORDS:], handle)
