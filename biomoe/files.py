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
import errno
import hashlib
import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO

from biomoe.errors import GenomeInputError

__all__ = ["OutputSet", "commit_together", "sweep_stale_temps", "atomic_path", "atomic_write", "write_bytes",
           "write_text", "sha256_file", "replaced_outputs", "check_not_input", "check_outputs", "protect_inputs",
           "protected_inputs", "same_file", "file_mode"]

PathLike = str | os.PathLike[str]

_protected: list[Path] = []  # inputs of the command that is running (see protect_inputs)
_replaced: list[str] = []  # outputs of the running command that exist already (see check_outputs)


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
    _replaced.clear()
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
        sweep_stale_temps(dest)  # a killed earlier run's temporaries for this output
        fd, tmp = _new_temp(dest)
        os.close(fd)
        os.unlink(tmp)
        if dest.exists():
            existing.append(os.fspath(output))
    # The one policy for outputs that exist: replaced only once the new file is complete (atomic
    # rename), so a failed run leaves the old one as it was; said when the command has succeeded
    # (:func:`replaced_outputs`), so a command that then fails prints no note about files it kept.
    _replaced.extend(o for o in existing if o not in _replaced)


def replaced_outputs() -> str | None:
    """The note for outputs of this command that existed before it, once it has succeeded (then
    forgotten): ``biomoe: note: replaced a.tsv, b.npz``; None when it replaced nothing."""
    if not _replaced:
        return None
    shown = ", ".join(_replaced[:3]) + (f" (+{len(_replaced) - 3} more)" if len(_replaced) > 3 else "")
    _replaced.clear()
    return f"biomoe: note: replaced {shown} (the earlier output)"


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
    if (exc.filename and os.fspath(exc.filename) != os.fspath(path) and TEMP_MARK not in str(exc.filename)
            and not str(exc.filename).endswith(".tmp")):
        detail += f": {exc.filename}"
    return GenomeInputError(path, f"cannot write output ({detail})")


# ---------------------------------------------------------------------------------------------
# Temporaries: recognisable by name, so a killed run's leftovers are swept by the next one
# ---------------------------------------------------------------------------------------------
TEMP_MARK = ".biomoe-tmp-"
"""Every temporary beside an output is ``.<output name>.biomoe-tmp-<pid>-<random>.tmp[<suffix>]``:
the output it belongs to and the process that made it can be read back from the name."""


def _temp_prefix(dest: Path) -> str:
    return f".{dest.name}{TEMP_MARK}{os.getpid()}-"


def _new_temp(dest: Path, suffix: str = ".tmp") -> tuple[int, str]:
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        return tempfile.mkstemp(prefix=_temp_prefix(dest), suffix=suffix, dir=dest.parent)
    except OSError as exc:
        raise _output_error(dest, exc) from None


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
                _reraise(path, exc, [Path(tmp)])
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
    dest = _destination(path)
    fd, tmp = _new_temp(dest, suffix=".tmp" + "".join(dest.suffixes[-1:]))
    os.close(fd)
    if not create:
        os.unlink(tmp)
    with file_size_limit_as_error():
        try:
            yield Path(tmp)
            _fsync_file(Path(tmp))
            _commit(tmp, dest)
        except BaseException as exc:
            try:
                _reraise(path, exc, [Path(tmp)])
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


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
        return _output_error(path, exc)
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


def _reraise(path: PathLike, exc: BaseException, temps: Iterable[Path] = ()) -> None:
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


# ---------------------------------------------------------------------------------------------
# Several outputs of one command: all new, or all as they were
# ---------------------------------------------------------------------------------------------
class OutputSet:
    """The temporaries of one command's outputs (see :func:`commit_together`)."""

    def __init__(self, outputs: Sequence[PathLike], create: bool = True) -> None:
        self.given = [Path(p) for p in outputs]
        self.dests = [_destination(p) for p in outputs]
        if len(set(self.dests)) != len(self.dests):
            raise ValueError(f"outputs named twice: {[os.fspath(p) for p in outputs]}")
        self.temps: list[Path] = []
        self.dropped: set[int] = set()
        self.scratches: list[Path] = []
        for dest in self.dests:
            sweep_stale_temps(dest)
            self.temps.append(self._make(dest, ".tmp" + "".join(dest.suffixes[-1:]), create))
        self.created = [_stamp(tmp) for tmp in self.temps]  # to tell which a failing writer had begun

    def _make(self, dest: Path, suffix: str, create: bool) -> Path:
        fd, tmp = _new_temp(dest, suffix=suffix)
        os.close(fd)
        if not create:
            os.unlink(tmp)
        return Path(tmp)

    def _index(self, output: PathLike) -> int:
        given = Path(output)
        for i, (name, dest) in enumerate(zip(self.given, self.dests)):
            if given in (name, dest):
                return i
        raise KeyError(f"{output} is not one of this command's outputs")

    def __iter__(self) -> Iterator[Path]:
        return iter(self.temps)

    def __len__(self) -> int:
        return len(self.temps)

    def temp(self, output: PathLike) -> Path:
        """Where to write ``output``'s new contents."""
        return self.temps[self._index(output)]

    def drop(self, output: PathLike) -> None:
        """``output`` gets no new contents: an earlier run's file of that name is removed at
        commit (a stale sidecar must not sit beside new results), kept if the command fails."""
        index = self._index(output)
        self.dropped.add(index)
        with contextlib.suppress(OSError):
            self.temps[index].unlink()

    def scratch(self, suffix: str = ".tmp") -> Path:
        """A working file beside the first output, named as a temporary of it (so a killed run's
        is swept), removed when the set ends whether it commits or not."""
        path = self._make(self.dests[0], suffix, create=True)
        self.scratches.append(path)
        return path

    def cleanup(self) -> None:
        for path in [*self.temps, *self.scratches]:
            with contextlib.suppress(OSError):
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()

    def commit(self) -> None:
        """Every output renamed into place, or (a rename failing midway) the earlier files back."""
        for index, tmp in enumerate(self.temps):
            if index not in self.dropped and tmp.is_file():
                _fsync_file(tmp)
                os.chmod(tmp, file_mode())
        backups = self._back_up()
        done: list[int] = []
        try:
            for index, (tmp, dest) in enumerate(zip(self.temps, self.dests)):
                if index in self.dropped:
                    named = self.given[index] if self.given[index].is_symlink() else dest
                    if named.exists() or named.is_symlink():
                        os.unlink(named)
                else:
                    os.replace(tmp, dest)
                done.append(index)
        except BaseException:
            self._restore(done, backups)
            raise
        finally:
            for backup in backups.values():
                with contextlib.suppress(OSError):
                    backup.unlink()
        for directory in {dest.parent for dest in self.dests}:
            _fsync_dir(directory)

    def _back_up(self) -> dict[int, Path]:
        """Hard links to the current outputs (free, same folder), to put back if a later rename fails."""
        backups: dict[int, Path] = {}
        for index, dest in enumerate(self.dests):
            if not dest.is_file():
                continue
            backup = self._make(dest, ".old.tmp", create=False)
            try:
                os.link(dest, backup)
            except OSError:
                continue  # no hard links here: a failed rename then leaves that one output new
            backups[index] = backup
        return backups

    def _restore(self, done: list[int], backups: dict[int, Path]) -> None:
        for index in done:
            dest = self.dests[index]
            with contextlib.suppress(OSError):
                if index in backups:
                    os.replace(backups.pop(index), dest)
                elif index not in self.dropped:
                    dest.unlink()

    def failed_output(self, exc: BaseException) -> Path:
        """The output a failed write was for: the one whose temporary the error names, else the
        one written last (a writer that does not say which file it was writing), else the first."""
        named = os.fspath(getattr(exc, "filename", None) or "")
        for given, tmp, dest in zip(self.given, self.temps, self.dests):
            if named and named in (os.fspath(tmp), os.fspath(dest)):
                return given
        touched = [(stamp, given) for given, tmp, created in zip(self.given, self.temps, self.created)
                   if (stamp := _stamp(tmp)) is not None and stamp != created]
        if touched:
            return max(touched, key=lambda item: item[0][0])[1]
        return self.given[0]  # failed before its first byte: writers go in the order of the outputs


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def commit_together(outputs: Sequence[PathLike], create: bool = True) -> Iterator[OutputSet]:
    """``with commit_together([tsv, npz]) as (tmp_tsv, tmp_npz): ...``: one command's outputs,
    written to temporaries beside them and renamed into place only once the block has written
    them all. On any exception (also Ctrl-C) every output keeps its earlier contents and the
    temporaries are removed; a write that fails (disk full, file size limit, quota, read-only
    folder, permission) becomes one line naming the output. ``create=False`` hands over names
    that do not exist yet (writers that refuse or read an existing file)."""
    with file_size_limit_as_error():
        outputs_set = OutputSet(outputs, create=create)
        try:
            yield outputs_set
            outputs_set.commit()
        except BaseException as exc:
            _reraise(outputs_set.failed_output(exc), exc, outputs_set.temps)
        finally:
            outputs_set.cleanup()  # scratch files; the renamed temporaries are gone already


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


def sha256_file(path: PathLike) -> str:
    """The sha256 of a file's bytes, read in blocks (any size, flat memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()
