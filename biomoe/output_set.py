"""Several outputs of one command: all new, or all as they were.

A command that writes a result and its sidecar (a TSV and its NPZ, a JSON and its plots) must
never leave a new result beside an old sidecar. :func:`commit_together` writes them all to
temporaries beside the outputs (:mod:`biomoe.temporaries`) and renames them into place only
once every one is written; if a rename fails midway, the earlier files are put back.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

from biomoe.files import file_mode, file_size_limit_as_error, fsync_dir, fsync_file, reraise_write_failure
from biomoe.output_checks import destination
from biomoe.temporaries import new_temp, sweep_stale_temps

__all__ = ["OutputSet", "commit_together"]

PathLike = str | os.PathLike[str]


class OutputSet:
    """The temporaries of one command's outputs (see :func:`commit_together`)."""

    def __init__(self, outputs: Sequence[PathLike], create: bool = True) -> None:
        self.given = [Path(p) for p in outputs]
        self.dests = [destination(p) for p in outputs]
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
        fd, tmp = new_temp(dest, suffix=suffix)
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
                fsync_file(tmp)
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
            fsync_dir(directory)

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
            reraise_write_failure(outputs_set.failed_output(exc), exc, outputs_set.temps)
        finally:
            outputs_set.cleanup()  # scratch files; the renamed temporaries are gone already
