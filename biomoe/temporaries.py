"""Temporary files beside outputs: named so that a killed run's leftovers are swept by the next one.

Every output biomoe writes is first written to a temporary in the destination's folder (so the
final rename never crosses a file system). The name says which output the temporary belongs to
and which process made it, so a later run can remove the ones whose process no longer runs (a
SIGKILL, a power cut between writing and renaming) and leave those of live processes alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path

from biomoe.errors import GenomeInputError

__all__ = ["TEMP_MARK", "new_temp", "output_error", "sweep_stale_temps"]

PathLike = str | os.PathLike[str]

TEMP_MARK = ".biomoe-tmp-"
"""Every temporary beside an output is ``.<output name>.biomoe-tmp-<pid>-<random>.tmp[<suffix>]``:
the output it belongs to and the process that made it can be read back from the name."""


def output_error(path: PathLike, exc: OSError) -> GenomeInputError:
    """The one line for an OS error while writing ``path``; a temporary's name, which means
    nothing to the user, is left out of it."""
    detail = exc.strerror or str(exc)
    if (exc.filename and os.fspath(exc.filename) != os.fspath(path) and TEMP_MARK not in str(exc.filename)
            and not str(exc.filename).endswith(".tmp")):
        detail += f": {exc.filename}"
    return GenomeInputError(path, f"cannot write output ({detail})")


def _temp_prefix(dest: Path) -> str:
    return f".{dest.name}{TEMP_MARK}{os.getpid()}-"


def new_temp(dest: Path, suffix: str = ".tmp") -> tuple[int, str]:
    """A new temporary of ``dest`` in its folder (created if missing): ``(fd, name)`` as ``mkstemp``
    returns them; an OS error becomes one line naming ``dest``."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        return tempfile.mkstemp(prefix=_temp_prefix(dest), suffix=suffix, dir=dest.parent)
    except OSError as exc:
        raise output_error(dest, exc) from None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process (or a number we cannot ask about): leave its files
    return True


def sweep_stale_temps(dest: PathLike) -> list[Path]:
    """Remove temporaries of ``dest`` left by processes that no longer run (a SIGKILL, a power cut
    between writing and renaming); returns what was removed. Temporaries of live processes,
    this one included, are left alone: another run may be writing the same output right now."""
    dest = Path(dest)
    pattern = re.compile(rf"^\.{re.escape(dest.name)}{re.escape(TEMP_MARK)}(\d+)-")
    removed: list[Path] = []
    try:
        entries = list(dest.parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = pattern.match(entry.name)
        if match is None or int(match.group(1)) == os.getpid() or _pid_alive(int(match.group(1))):
            continue
        with contextlib.suppress(OSError):
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
            removed.append(entry)
    return removed
