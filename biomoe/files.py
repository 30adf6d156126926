"""Writing files safely: atomically, with the user's permissions, and never over an input.

Every file biomoe writes (checkpoints, HF export/import, TSV/NPZ/JSON/PNG results, caches) goes
through :func:`atomic_write` or :func:`atomic_path`: the bytes go to a temporary file in the
destination's folder, are flushed and fsync'ed, and the temporary file is renamed over the
destination (``os.replace``). A process killed at any moment leaves either the old file or the new
one under the final name, never a truncated mix. The result gets the permissions a plain ``open``
would give (``0o666`` minus the umask); ``mkstemp`` alone would leave it ``0600``.

Before writing, every destination is compared with the inputs of the running command
(:func:`protect_inputs` registers them, :func:`check_not_input` compares): the same file is
recognised through symlinks (``realpath``) and hard links (``st_dev``/``st_ino``), so an ``--out``
that names the reference genome, the variant table or the checkpoint is refused with one line
instead of destroying it. Commands call :func:`check_outputs` up front, so the refusal comes before
any long work; the writers check again at write time, for outputs decided later (checkpoints,
prediction files).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from biomoe.errors import GenomeInputError

__all__ = ["atomic_path", "atomic_write", "write_bytes", "write_text", "check_not_input", "check_outputs",
           "protect_inputs", "protected_inputs", "same_file", "file_mode"]

PathLike = str | os.PathLike[str]

_protected: list[Path] = []  # inputs of the command that is running (see protect_inputs)


# ---------------------------------------------------------------------------------------------
# Inputs that must never be written over
# ---------------------------------------------------------------------------------------------
_DERIVED_SUFFIXES = (".fai", ".gzi")  # indexes biomoe rebuilds when stale: derived, not inputs


def _expand(path: Path) -> list[Path]:
    """A folder stands for itself and the files directly in it (FASTA folders, HF model folders),
    less the FASTA indexes beside them, which biomoe keeps up to date itself."""
    if path.is_dir():
        with contextlib.suppress(OSError):
            return [path, *sorted(p for p in path.iterdir() if p.is_file() and not p.name.endswith(_DERIVED_SUFFIXES))]
    return [path]


def protect_inputs(paths: Iterable[PathLike | None]) -> None:
    """Register the running command's inputs; :func:`atomic_write` refuses to replace any of them."""
    for item in paths:
        if item is None or os.fspath(item) == "":
            continue
        for path in _expand(Path(item).expanduser()):
            if path not in _protected:
                _protected.append(path)


def protected_inputs() -> list[Path]:
    return list(_protected)


@contextlib.contextmanager
def input_scope() -> Iterator[None]:
    """Inputs registered inside belong to one command: forgotten when it ends (the CLI runs every
    command inside one, so in-process callers running several commands do not mix them up)."""
    saved = list(_protected)
    _protected.clear()
    try:
        yield
    finally:
        _protected[:] = saved


def same_file(a: PathLike, b: PathLike) -> bool:
    """Whether two paths name the same file: same real path (symlinks), or the same inode
    (hard links, bind mounts). A path that does not exist is the same only by real path."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def check_not_input(output: PathLike, inputs: Iterable[PathLike] | None = None) -> None:
    """GenomeInputError naming ``output`` when it is one of ``inputs`` (default: the registered ones)."""
    candidates = _protected if inputs is None else [p for item in inputs if item is not None
                                                     for p in _expand(Path(item).expanduser())]
    for source in candidates:
        if same_file(output, source):
            shown = "" if os.fspath(source) == os.fspath(output) else f" ({source})"
            raise GenomeInputError(output, f"is also an input of this command{shown}; biomoe never writes over "
                                           "an input: choose another output path")


def check_outputs(outputs: Iterable[PathLike | None], inputs: Iterable[PathLike | None]) -> None:
    """Before a command does its work: register ``inputs``, refuse any output among them, and make
    sure each output's folder exists and takes a new file (a bad ``--out`` fails now, not after an
    hour of scoring). Nothing is written under an output's name."""
    protect_inputs(inputs)
    existing = []
    for output in outputs:
        if output is None:
            continue
        dest = _destination(output)
        fd, tmp = _new_temp(dest)
        os.close(fd)
        os.unlink(tmp)
        if dest.exists():
            existing.append(os.fspath(output))
    if existing:
        # The one policy for outputs that exist: replaced, said here, and only once the new file
        # is complete (atomic rename), so a failed run leaves the old one as it was.
        shown = ", ".join(existing[:3]) + (f" (+{len(existing) - 3} more)" if len(existing) > 3 else "")
        # stdout, beside the command's "wrote ..." lines: stderr stays one line when an input is bad
        print(f"biomoe: note: replacing {shown} when this command finishes")


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


def _destination(path: PathLike) -> Path:
    """Where the bytes go: through a symlink to its target (as ``open`` would write), refusing
    folders and registered inputs."""
    given = Path(path).expanduser()
    check_not_input(given)  # named as the user gave it; realpath and inode see through links
    dest = Path(os.path.realpath(given)) if given.is_symlink() else given
    if dest.is_dir():
        raise GenomeInputError(path, "is a folder; a file name is needed here")
    return dest


def _fsync_dir(directory: Path) -> None:
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


def _output_error(path: PathLike, exc: OSError) -> GenomeInputError:
    detail = exc.strerror or str(exc)
    if exc.filename and os.fspath(exc.filename) != os.fspath(path) and not str(exc.filename).endswith(".tmp"):
        detail += f": {exc.filename}"
    return GenomeInputError(path, f"cannot write output ({detail})")


def _new_temp(dest: Path, suffix: str = ".tmp") -> tuple[int, str]:
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        return tempfile.mkstemp(prefix=f".{dest.name}.", suffix=suffix, dir=dest.parent)
    except OSError as exc:
        raise _output_error(dest, exc) from None


def _commit(tmp: str, dest: Path) -> None:
    os.chmod(tmp, file_mode())
    os.replace(tmp, dest)
    _fsync_dir(dest.parent)


@contextlib.contextmanager
def atomic_write(path: PathLike, mode: str = "w", encoding: str | None = "utf-8",
                 newline: str | None = None) -> Iterator[IO]:
    """``with atomic_write(path, "wb") as fh: ...``: a file handle whose contents replace ``path``
    only when the block completes; on any exception (also Ctrl-C) ``path`` is left untouched and
    the temporary file removed. OS errors become one line naming ``path``."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write mode must be 'w' or 'wb', got {mode!r}")
    dest = _destination(path)
    fd, tmp = _new_temp(dest)
    try:
        kwargs = {} if "b" in mode else {"encoding": encoding, "newline": newline}
        with os.fdopen(fd, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        _commit(tmp, dest)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        _reraise(path, exc)


@contextlib.contextmanager
def atomic_path(path: PathLike, create: bool = True) -> Iterator[Path]:
    """``with atomic_path(out) as tmp: library.save(..., tmp)``: for writers that need a file name
    rather than a handle (safetensors, numpy, matplotlib, pyfaidx). ``tmp`` is in ``out``'s folder
    and ends in ``out``'s suffix (``.tmp.npz``), so writers that pick a format or append a suffix
    by the name do what they would for ``out``. ``create=False`` hands over a name that does not
    exist yet, for writers that treat an existing file as something to read (pyfaidx's ``.gzi``)."""
    dest = _destination(path)
    fd, tmp = _new_temp(dest, suffix=".tmp" + "".join(dest.suffixes[-1:]))
    os.close(fd)
    if not create:
        os.unlink(tmp)
    try:
        yield Path(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        _commit(tmp, dest)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        _reraise(path, exc)


def _interrupted(exc: BaseException) -> bool:
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _reraise(path: PathLike, exc: BaseException) -> None:
    """After a failed write: Ctrl-C stays Ctrl-C (torch's zip writer, interrupted while it calls
    back into Python, raises a RuntimeError about file positions instead), OS errors become one
    line naming the output, anything else propagates as it is."""
    if _interrupted(exc) and not isinstance(exc, KeyboardInterrupt):
        raise KeyboardInterrupt from None
    if isinstance(exc, OSError):
        raise _output_error(path, exc) from None
    raise exc


def write_text(path: PathLike, text: str) -> None:
    with atomic_write(path, "w") as handle:
        handle.write(text)


def write_bytes(path: PathLike, data: bytes) -> None:
    with atomic_write(path, "wb") as handle:
        handle.write(data)


def decode_user_text(raw: bytes, path: PathLike, kind: str, gzip_advice: str = "") -> str:
    """The text of a plain-text input the user wrote (a config, a variant table), or one line why not.

    ``kind`` names what the file should be ("a YAML config"). A UTF-8 byte-order mark, which
    spreadsheet "UTF-8" exports write, is dropped; gzip, other encodings and binary content are
    refused with the offending byte's offset, so the user can find it."""
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    if raw[:2] == b"\x1f\x8b":
        raise GenomeInputError(path, f"is gzip-compressed, not {kind}{gzip_advice}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GenomeInputError(path, f"not {kind} (not UTF-8 text: byte 0x{raw[exc.start]:02x} at "
                                     f"offset {exc.start:,})") from None
    if "\x00" in text:
        raise GenomeInputError(path, f"not {kind} (binary content)")
    return text


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
