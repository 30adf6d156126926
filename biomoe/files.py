"""Writing files safely: atomically, with the user's permissions, and never over an input.

Every file biomoe writes (checkpoints, HF export/import, TSV/NPZ/JSON/PNG results, caches) goes
through :func:`atomic_write` or :func:`atomic_path`: the bytes go to a temporary file in the
destination's folder (:mod:`biomoe.temporaries`), are flushed and fsync'ed, and the temporary file
is renamed over the destination (``os.replace``). A process killed at any moment leaves either the
old file or the new one under the final name, never a truncated mix. The result gets the
permissions a plain ``open`` would give (``0o666`` minus the umask); ``mkstemp`` alone would leave
it ``0600``. A destination that is one of the running command's inputs is refused
(:mod:`biomoe.output_checks`), and a write that fails (disk full, file size limit, quota) becomes
one line naming the output. Several outputs that must change together: :mod:`biomoe.output_set`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import signal
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from biomoe.errors import GenomeInputError
from biomoe.output_checks import destination
from biomoe.temporaries import new_temp, output_error

__all__ = ["atomic_path", "atomic_write", "file_mode", "file_size_limit_as_error", "fsync_dir", "fsync_file",
           "reraise_write_failure", "save_figure", "swap_in_directory", "write_bytes", "write_failure", "write_text"]

PathLike = str | os.PathLike[str]


# ---------------------------------------------------------------------------------------------
# Atomic writes
# ---------------------------------------------------------------------------------------------
def file_mode() -> int:
    """Permissions of a new file under the current umask (what ``open(path, "w")`` would give)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status") as status:  # reading the umask without changing it (Linux)
            for line in status:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (a crash right after ``os.replace`` keeps the new name)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """Flush a finished file to disk before it is renamed into place."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _commit(tmp: str, dest: Path) -> None:
    os.chmod(tmp, file_mode())
    os.replace(tmp, dest)
    fsync_dir(dest.parent)


@contextlib.contextmanager
def atomic_write(path: PathLike, mode: str = "w", encoding: str | None = "utf-8",
                 newline: str | None = None) -> Iterator[IO]:
    """``with atomic_write(path, "wb") as fh: ...``: a file handle whose contents replace ``path``
    only when the block completes; on any exception (also Ctrl-C) ``path`` is left untouched and
    the temporary file removed. OS errors become one line naming ``path``."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write mode must be 'w' or 'wb', got {mode!r}")
    dest = destination(path)
    fd, tmp = new_temp(dest)
    with file_size_limit_as_error():
        try:
            kwargs = {} if "b" in mode else {"encoding": encoding, "newline": newline}
            with os.fdopen(fd, mode, **kwargs) as handle:
                yield handle
                handle.flush()
                os.fsync(handle.fileno())
            _commit(tmp, dest)
        except BaseException as exc:
            try:
                reraise_write_failure(path, exc, [Path(tmp)])
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


@contextlib.contextmanager
def atomic_path(path: PathLike, create: bool = True) -> Iterator[Path]:
    """``with atomic_path(out) as tmp: library.save(..., tmp)``: for writers that need a file name
    rather than a handle (safetensors, numpy, matplotlib, pyfaidx). ``tmp`` is in ``out``'s folder
    and ends in ``out``'s suffix (``.tmp.npz``), so writers that pick a format or append a suffix
    by the name do what they would for ``out``. ``create=False`` hands over a name that does not
    exist yet, for writers that treat an existing file as something to read (pyfaidx's ``.gzi``)."""
    dest = destination(path)
    fd, tmp = new_temp(dest, suffix=".tmp" + "".join(dest.suffixes[-1:]))
    os.close(fd)
    if not create:
        os.unlink(tmp)
    with file_size_limit_as_error():
        try:
            yield Path(tmp)
            fsync_file(Path(tmp))
            _commit(tmp, dest)
        except BaseException as exc:
            try:
                reraise_write_failure(path, exc, [Path(tmp)])
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


def write_text(path: PathLike, text: str) -> None:
    with atomic_write(path, "w") as handle:
        handle.write(text)


def write_bytes(path: PathLike, data: bytes) -> None:
    with atomic_write(path, "wb") as handle:
        handle.write(data)


def swap_in_directory(tmp: Path, final: Path) -> None:
    """Replace ``final`` (file or directory) by the finished ``tmp`` directory.

    Two renames rather than one because a non-empty directory cannot be renamed over; in the
    short window between them a reader finds either the old or the new copy under ``.old``.
    """
    old = final.with_name(f".{final.name}.old")
    if old.exists():
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    if final.exists() or final.is_symlink():
        os.replace(final, old)
    os.replace(tmp, final)
    if old.exists():
        shutil.rmtree(old) if old.is_dir() else old.unlink()


def save_figure(fig, out_path: PathLike, dpi: int) -> None:
    """``fig.savefig`` atomically (the image appears complete or not at all, never over an input)."""
    with atomic_path(out_path) as tmp:
        fig.savefig(tmp, dpi=dpi)


# ---------------------------------------------------------------------------------------------
# Failed writes: one line naming the output
# ---------------------------------------------------------------------------------------------
def _interrupted(exc: BaseException) -> bool:
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


_WRITE_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO)
_RUST_OS_ERROR = re.compile(r"os error (\d+)|Os \{ code: (\d+)")  # safetensors' IoError(Os { code: 28, ... })
_WRITER_FAILED = ("file write failed", "unexpected pos", "PytorchStreamWriter failed", "IoError")


def _probe_reason(directory: Path, temps: Iterable[Path] = ()) -> str:
    """Why a writer that only says "write failed" (torch's zip writer) failed: a full disk, the
    file size limit (``ulimit -f``), else its own words are all there is."""
    with contextlib.suppress(OSError, ValueError):
        if os.statvfs(directory).f_bavail == 0:
            return os.strerror(errno.ENOSPC)
    with contextlib.suppress(ImportError, OSError, ValueError):
        import resource

        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit != resource.RLIM_INFINITY and any(p.is_file() and p.stat().st_size >= limit for p in temps):
            return os.strerror(errno.EFBIG) + " (file size limit, ulimit -f)"
    return ""


def write_failure(path: PathLike, exc: BaseException, temps: Iterable[Path] = ()) -> GenomeInputError | None:
    """The one line for an output that could not be written (disk full, file too large, quota,
    read-only file system, permission), whether the writer raised ``OSError`` or its own error
    about one (safetensors, torch's zip writer); None for any other exception."""
    if isinstance(exc, GenomeInputError):
        return exc
    if isinstance(exc, OSError):
        return output_error(path, exc)
    message = " ".join(str(exc).split())
    match = _RUST_OS_ERROR.search(message)
    if match is not None:
        number = int(match.group(1) or match.group(2))
        return GenomeInputError(path, f"cannot write output ({os.strerror(number)})")
    for number in _WRITE_ERRNOS:
        if os.strerror(number) in message:
            return GenomeInputError(path, f"cannot write output ({os.strerror(number)})")
    if any(text in message for text in _WRITER_FAILED):
        reason = _probe_reason(Path(path).parent, temps) or message[:160]
        return GenomeInputError(path, f"cannot write output ({reason})")
    return None


def reraise_write_failure(path: PathLike, exc: BaseException, temps: Iterable[Path] = ()) -> None:
    """After a failed write: Ctrl-C stays Ctrl-C (torch's zip writer, interrupted while it calls
    back into Python, raises a RuntimeError about file positions instead), failed writes become
    one line naming the output, anything else propagates as it is."""
    if _interrupted(exc) and not isinstance(exc, KeyboardInterrupt):
        raise KeyboardInterrupt from None
    if isinstance(exc, Exception):
        failure = write_failure(path, exc, temps)
        if failure is not None and failure is not exc:
            raise failure from None
    raise exc


@contextlib.contextmanager
def file_size_limit_as_error() -> Iterator[None]:
    """While outputs are written, a file size limit (``ulimit -f``) makes ``write`` fail with
    EFBIG, which becomes one line naming the output, instead of SIGXFSZ killing the process
    with nothing said and a temporary left behind. Signals can be set from the main thread only."""
    sig = getattr(signal, "SIGXFSZ", None)
    if sig is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(sig, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(sig, previous)
