"""``fit --help`` (and validate/test/predict) from a cache, so that asking for help is instant.

LightningCLI builds its help from the signatures of the Trainer, the model, the data module and
every callback, which means importing torch and Lightning: seconds on a small machine, most of it
spent before a single line can be printed. The text depends only on the installed packages, on
biomoe's own source and on the terminal's width, so the first ``--help`` of a subcommand is stored
under a key made of exactly those, and later ones print the stored text without importing either.
Any change to a package version, to a file of biomoe or to the width makes a new key, so a stale
text is never shown. The cache lives in the user's cache folder (``$XDG_CACHE_HOME/biomoe/help``,
else ``~/.cache/biomoe/help``); ``BIOMOE_HELP_CACHE=0`` turns it off. A cache that cannot be read
or written is simply not used.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

__all__ = ["cache_folder", "help_key", "cached_help", "store_help", "is_help_request"]

_PACKAGE = Path(__file__).resolve().parents[1]
_DISTRIBUTIONS = ("lightning", "jsonargparse", "torch", "torchmetrics", "transformer_engine")


def is_help_request(argv: list[str]) -> bool:
    """``<subcommand> --help`` alone: other arguments (a config file, say) can change the text."""
    return len(argv) == 2 and argv[1] in ("--help", "-h")


def cache_folder() -> Path | None:
    if os.environ.get("BIOMOE_HELP_CACHE", "1") == "0":
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "biomoe" / "help"


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "-"


def _source_signature() -> Iterator[str]:
    """Name, size and modification time of every file of the package (docstrings are help text)."""
    for root, dirs, names in os.walk(_PACKAGE):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith((".py", ".yaml")):
                stat = os.stat(os.path.join(root, name))
                yield f"{os.path.relpath(os.path.join(root, name), _PACKAGE)}:{stat.st_size}:{stat.st_mtime_ns}"


def help_key(argv: list[str]) -> str:
    parts = [sys.version, " ".join(argv), str(shutil.get_terminal_size().columns), str(_PACKAGE)]
    parts += [f"{name}={_version(name)}" for name in _DISTRIBUTIONS]
    parts += list(_source_signature())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def cached_help(argv: list[str]) -> str | None:
    folder = cache_folder()
    if folder is None:
        return None
    try:
        return (folder / f"{help_key(argv)}.txt").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def store_help(argv: list[str], text: str) -> None:
    """Keep ``text`` for this key (written whole or not at all); older entries of the same
    subcommand are removed, so the folder holds one text per subcommand."""
    folder = cache_folder()
    if folder is None or not text:
        return
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        key = help_key(argv)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{key}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(tmp, folder / f"{key}.txt")
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        index = folder / f"{argv[0]}.key"
        with contextlib.suppress(OSError):
            old = index.read_text().strip()
            if old and old != key:
                (folder / f"{old}.txt").unlink(missing_ok=True)
        index.write_text(key)
