"""Which FASTA files a path names, and the short label each file goes by.

A user gives files, folders or a list of both; training must see each genome once, in an order
that does not depend on the file system, and must say (by name) which entries of a folder it
skipped, so a genome missing from the training set is never missed silently.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path

from biomoe.errors import GenomeInputError

__all__ = ["FASTA_SUFFIXES", "file_labels", "resolve_fasta_paths"]

FASTA_SUFFIXES: tuple[str, ...] = (".fa", ".fasta", ".fna", ".fa.gz", ".fasta.gz", ".fna.gz")


def file_labels(paths: Sequence[Path]) -> list[str]:
    """One short, unique label per file: its name without FASTA suffixes (``ecoli_536.fna.gz``
    -> ``ecoli_536``), or the whole name, then the path, where that would repeat. Labels name
    genomes in metrics (``val/<label>/bits_per_base``) and namespace repeated contig names."""
    def stem(path: Path) -> str:
        name = path.name
        for suffix in sorted(FASTA_SUFFIXES, key=len, reverse=True):
            if name.lower().endswith(suffix):
                return name[: -len(suffix)] or name
        return name

    for rule in (stem, lambda p: p.name, str):
        labels = [rule(Path(p)) for p in paths]
        if len(set(labels)) == len(labels):
            return labels
    return [f"{label}.{i}" for i, label in enumerate(labels)]



def resolve_fasta_paths(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Expand files and folders into a list of readable FASTA files.

    A folder contributes all ``*.fa, *.fasta, *.fna`` (optionally ``.gz``) files in it,
    sorted by name, so the contig order (and hence window order) is reproducible.
    """
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not items:
        raise GenomeInputError(None, "no FASTA path given")
    files: list[Path] = []
    for item in items:
        path = Path(item).expanduser()
        if not path.exists():
            raise GenomeInputError(path, "no such file or directory")
        if not os.access(path, os.R_OK):
            raise GenomeInputError(path, "permission denied (not readable)")
        if path.is_dir():
            found = _usable_folder_entries(path)
            if not found:
                raise GenomeInputError(path, f"folder contains no FASTA files ({', '.join(FASTA_SUFFIXES)})")
            files.extend(found)
        else:
            files.append(path)
    return _each_file_once(files)


def _each_file_once(files: list[Path]) -> list[Path]:
    """The same file named twice (listed twice, through a symlink, or also found in a listed folder)
    would be trained on twice and its contigs namespaced against themselves: it is used once, at
    its first place, with a warning naming both spellings."""
    first: dict[Path, Path] = {}
    kept: list[Path] = []
    for path in files:
        real = path.resolve()
        if real in first:
            shown = "" if first[real] == path else f" as {first[real]}"
            warnings.warn(f"{path}: listed again (already given{shown}); the file is used once", stacklevel=3)
            continue
        first[real] = path
        kept.append(path)
    return kept


def _usable_folder_entries(folder: Path) -> list[Path]:
    """The folder's FASTA files, sorted; entries named like FASTA that cannot be read (a dangling
    symlink, a sub-folder, no read permission) are skipped with a warning naming each, so a
    genome missing from the training set is never missed silently."""
    found: list[Path] = []
    others: list[str] = []
    for entry in sorted(folder.iterdir()):
        if not entry.name.lower().endswith(FASTA_SUFFIXES):
            # hidden entries (biomoe's own cache) and FASTA indexes belong beside genomes
            if not entry.name.startswith(".") and not entry.name.lower().endswith(_COMPANION_SUFFIXES):
                others.append(entry.name)
            continue
        if entry.is_symlink() and not entry.exists():
            problem = f"dangling symlink (to {os.readlink(entry)})"
        elif not entry.is_file():
            problem = "not a regular file"
        elif not os.access(entry, os.R_OK):
            problem = "permission denied (not readable)"
        else:
            found.append(entry)
            continue
        warnings.warn(f"{entry}: {problem}; skipped, the other FASTA files of {folder} are used", stacklevel=3)
    if others:
        more = f" (+{len(others) - 3} more)" if len(others) > 3 else ""
        warnings.warn(f"{folder}: skipped {len(others)} file(s) not named like FASTA ({', '.join(others[:3])}{more}); "
                      f"FASTA files end in {', '.join(FASTA_SUFFIXES[:4])} ...", stacklevel=3)
    return found


_COMPANION_SUFFIXES = (".fai", ".gzi", ".md5", ".sha256")
"""Files that accompany a FASTA file in a genome folder and are not worth a warning."""
