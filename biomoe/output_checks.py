"""Outputs checked against the command's inputs: biomoe never writes over an input.

Before writing, every destination is compared with the inputs of the running command
(:func:`protect_inputs` registers them, :func:`check_not_input` compares): the same file is
recognised through symlinks (``realpath``) and hard links (``st_dev``/``st_ino``), so an ``--out``
that names the reference genome, the variant table or the checkpoint is refused with one line
instead of destroying it. Commands call :func:`check_outputs` up front, so the refusal comes before
any long work; the writers (:mod:`biomoe.files`) check again at write time (:func:`destination`),
for outputs decided later (checkpoints, prediction files).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from biomoe.errors import GenomeInputError
from biomoe.temporaries import new_temp, sweep_stale_temps

__all__ = ["check_not_input", "check_outputs", "destination", "input_scope", "protect_inputs", "protected_inputs",
           "replaced_outputs", "same_file"]

PathLike = str | os.PathLike[str]

_protected: list[Path] = []  # inputs of the command that is running (see protect_inputs)
_replaced: list[str] = []  # outputs of the running command that exist already (see check_outputs)

_DERIVED_SUFFIXES = (".fai", ".gzi")  # indexes biomoe rebuilds when stale: derived, not inputs


def _expand(path: Path) -> list[Path]:
    """A folder stands for itself and the files directly in it (FASTA folders, HF model folders),
    less the FASTA indexes beside them, which biomoe keeps up to date itself."""
    if path.is_dir():
        with contextlib.suppress(OSError):
            return [path, *sorted(p for p in path.iterdir() if p.is_file() and not p.name.endswith(_DERIVED_SUFFIXES))]
    return [path]


def protect_inputs(paths: Iterable[PathLike | None]) -> None:
    """Register the running command's inputs; no atomic write may replace any of them."""
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


def destination(path: PathLike) -> Path:
    """Where the bytes go: through a symlink to its target (as ``open`` would write), refusing
    folders and registered inputs."""
    given = Path(path).expanduser()
    check_not_input(given)  # named as the user gave it; realpath and inode see through links
    dest = Path(os.path.realpath(given)) if given.is_symlink() else given
    if dest.is_dir():
        raise GenomeInputError(path, "is a folder; a file name is needed here")
    return dest


def check_outputs(outputs: Iterable[PathLike | None], inputs: Iterable[PathLike | None]) -> None:
    """Before a command does its work: register ``inputs``, refuse any output among them, and make
    sure each output's folder exists and takes a new file (a bad ``--out`` fails now, not after an
    hour of scoring). Nothing is written under an output's name."""
    protect_inputs(inputs)
    existing = []
    for output in outputs:
        if output is None:
            continue
        dest = destination(output)
        sweep_stale_temps(dest)  # a killed earlier run's temporaries for this output
        fd, tmp = new_temp(dest)
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
