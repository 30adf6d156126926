"""Train, validation and test regions of a genome that share no base.

Whole files can be held out for validation or test (``val_files``, ``test_files``: strains a
model never saw); in the other files whole contigs are held out (``val_contigs``,
``test_contigs``) or the end of every contig is: the last ``val_fraction`` for validation and,
before it, a ``test_fraction`` stretch for test, with training windows ending before the first cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from biomoe.data.config import check_settings, held_out_cuts
from biomoe.data.sources.reader import Region, SequenceReader, contig_lookup, reader_label
from biomoe.errors import GenomeInputError

__all__ = ["Splits", "match_files", "split_genome", "split_regions"]


@dataclass
class Splits:
    """Train, validation and test regions of one genome; no base is in two of them."""

    train: list[Region]
    val: list[Region]
    test: list[Region]


def match_files(genome: SequenceReader, keys: Sequence[str] | None, key: str) -> list[int]:
    """Indices into ``genome.paths`` of the files that ``keys`` name.

    A file is named by its label (``ecoli_536`` for ``ecoli_536.fna.gz``, see
    :func:`~biomoe.data.sources.fasta_paths.file_labels`), its file name, or its path. ``key`` is the
    setting being read, for the error message.
    """
    found: list[int] = []
    for wanted in keys or []:
        text = str(wanted)
        resolved = Path(text).expanduser().resolve()
        hits = [i for i, (label, path) in enumerate(zip(genome.labels, genome.paths))
                if text in (label, path.name, str(path)) or resolved == path.resolve()]
        if not hits:
            raise GenomeInputError(reader_label(genome), f"data.{key}: no FASTA file '{text}' among the inputs "
                                                          f"(files: {', '.join(genome.labels)})")
        found.extend(h for h in hits if h not in found)
    return found


def _contig_indices(genome: SequenceReader, names: Sequence[str], key: str) -> list[int]:
    index = contig_lookup(genome)
    indices = []
    for name in names:
        if name in index:
            indices.append(index[name])
            continue
        namespaced = [c.name for c in genome.contigs if c.record == name]
        if namespaced:
            raise GenomeInputError(reader_label(genome), f"{key}: contig '{name}' is in several files; name one of "
                                                         f"{', '.join(namespaced)}")
        known = ", ".join(list(index)[:10]) + (" ..." if len(index) > 10 else "")
        raise GenomeInputError(reader_label(genome), f"{key}: unknown contig '{name}' (contigs: {known})")
    return indices


def split_genome(
    genome: SequenceReader,
    *,
    val_contigs: Sequence[str] | None = None,
    val_fraction: float = 0.1,
    test_contigs: Sequence[str] | None = None,
    test_fraction: float = 0.0,
    val_files: Sequence[str] | None = None,
    test_files: Sequence[str] | None = None,
) -> Splits:
    """Train, validation and test regions that share no base.

    * Files in ``val_files`` / ``test_files`` are validation / test as a whole.
    * In the other files, contigs named in ``val_contigs`` / ``test_contigs`` are held out
      whole. Where no contigs are named for a split, its fraction of every remaining contig
      is: each contig of length L is cut so that train is ``[0, a)``, test ``[a, b)`` and
      validation ``[b, L)`` with ``b = floor(L * (1 - val_fraction))`` and
      ``a = floor(L * (1 - val_fraction - test_fraction))``. Validation stays at the end of
      the contig, where it is without a test split, so adding one leaves validation numbers
      comparable.

    Unknown names raise GenomeInputError; a split that leaves nothing to train on too.
    """
    label = reader_label(genome)
    check_settings(val_fraction=val_fraction, test_fraction=test_fraction)
    held_val = set(match_files(genome, val_files, "val_files"))
    held_test = set(match_files(genome, test_files, "test_files"))
    if held_val & held_test:
        both = genome.labels[min(held_val & held_test)]
        raise GenomeInputError(label, f"data.val_files and data.test_files both hold out '{both}'")
    val_named = set(_contig_indices(genome, val_contigs or [], "val_contigs"))
    test_named = set(_contig_indices(genome, test_contigs or [], "test_contigs"))
    if val_named & test_named:
        raise GenomeInputError(label, f"contig '{genome.contigs[min(val_named & test_named)].name}' is in both "
                                      "data.val_contigs and data.test_contigs")
    for index in sorted(val_named | test_named):
        file_index = genome.contigs[index].file_index
        if file_index in held_val | held_test:
            raise GenomeInputError(label, f"contig '{genome.contigs[index].name}' is named in data.val_contigs or "
                                          f"data.test_contigs but its file '{genome.labels[file_index]}' is held "
                                          "out whole")
    val_cut, test_cut = held_out_cuts(val_fraction, test_fraction, val_contigs, test_contigs)
    splits = Splits([], [], [])
    for i, c in enumerate(genome.contigs):
        whole = (0, c.length)
        if c.file_index in held_val or i in val_named:
            splits.val.append((i, *whole))
        elif c.file_index in held_test or i in test_named:
            splits.test.append((i, *whole))
        else:
            val_start = int(c.length * (1.0 - val_cut))
            test_start = int(c.length * (1.0 - val_cut - test_cut))
            splits.train.append((i, 0, test_start))
            if test_start < val_start:
                splits.test.append((i, test_start, val_start))
            if val_start < c.length:
                splits.val.append((i, val_start, c.length))
    if not any(hi > lo for _, lo, hi in splits.train):
        held_out = val_files or test_files or val_contigs or test_contigs
        what = "the held-out files and contigs cover" if held_out else "the split covers"
        raise GenomeInputError(label, f"{what} every contig; nothing is left to train on")
    return splits


def split_regions(
    genome: SequenceReader, val_contigs: Sequence[str] | None, val_fraction: float
) -> tuple[list[Region], list[Region]]:
    """Train and validation regions that share no base (:func:`split_genome` without test).

    With ``val_contigs`` the named contigs are validation and the rest train (unknown
    names raise GenomeInputError). Otherwise each contig is cut at
    ``floor(length * (1 - val_fraction))``: train is before the cut, validation after.
    """
    splits = split_genome(genome, val_contigs=val_contigs, val_fraction=val_fraction)
    return splits.train, splits.val
