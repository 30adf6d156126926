"""The data settings (``data.*``): which genome, how it is cut into windows, what is held out.

:class:`DataConfig` is the one place that names, documents, defaults and range-checks them.
:class:`~biomoe.data.datamodule.GenomeDataModule` takes them as keyword arguments (so the
command-line keys stay ``--data.seq_length`` and configs read ``data: seq_length: ...``) and
keeps them as ``datamodule.config``. Checks that need the genome itself (unknown contig names,
files that are not FASTA) happen when it is opened.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

import docstring_parser

from biomoe.errors import ConfigError
from biomoe.checks import (boolean, check_fields, check_values, checked, field_checks, folder, integer, real,
                           sequence_of, text)

__all__ = ["DataConfig", "check_settings", "held_out_cuts", "takes_fields_of"]

_FRACTION = real(0.0, 1.0)
_SHARE = real(0.0, 1.0, hi_open=True)  # a share held out or mutated: 1 would leave nothing
_NAMES = sequence_of(text(), optional=True, unique=True)


def _sequence_paths(value: Any) -> str | None:
    """One path or a non-empty list of them (files or folders; the reader checks the content)."""
    if isinstance(value, (str, os.PathLike)):
        return None if os.fspath(value).strip() else "no FASTA path given (empty path)"
    if isinstance(value, Sequence) and not isinstance(value, bytes):
        if not value:
            return "no FASTA path given (an empty list)"
        for i, item in enumerate(value):
            if not isinstance(item, (str, os.PathLike)) or not os.fspath(item).strip():
                return f"[{i}] must be a FASTA file or folder path, got {item!r}"
        return None
    return f"must be a FASTA path or a list of them, got {value!r}"


def _file_weights(value: Any) -> str | None:
    """Per-file sampling weights: a mapping of file label -> finite weight >= 0."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        return f"must map file names to weights, got {value!r}"
    for name, weight in value.items():
        problem = real(0.0)(weight)
        if problem:
            return f"[{name}] {problem}"
    return None


@dataclass
class DataConfig:
    """Which genome the windows come from, how long they are, and which bases are held out."""

    key_prefix: ClassVar[str] = "data"

    fasta: str | list[str] = checked("data/lambda_virus.fa.gz", _sequence_paths)
    """FASTA file(s) or folder(s) (plain, gzip or bgzip); several files are one training set, each
    file a genome for sampling and per-genome metrics. Files of a registered sequence reader
    (see :func:`biomoe.data.sources.registry.register_reader`) are read by that reader."""
    seq_length: int = checked(1024, integer(1))
    """Bases per training window (the model's context)."""
    stride: int | None = checked(None, integer(1, optional=True))
    """Distance between training window starts; None = ``seq_length`` (windows do not overlap). With
    ``packing`` the pieces that would run past a contig's end are cut there and packed."""
    batch_size: int = checked(8, integer(1))
    """Windows per batch and device."""
    num_workers: int = checked(0, integer(0))
    """DataLoader worker processes (0 reads in the training process)."""
    val_contigs: list[str] | None = checked(None, _NAMES)
    """Contigs held out whole for validation (instead of ``val_fraction``)."""
    val_fraction: float = checked(0.1, _SHARE)
    """Share at the end of every contig held out for validation; 0 and no ``val_contigs`` or
    ``val_files`` disables validation."""
    max_n_fraction: float = checked(0.1, _FRACTION)
    """Windows (pieces, with ``packing``) with more N/ambiguous bases than this share are dropped."""
    rc_prob: float = checked(0.5, _FRACTION)
    """Probability of reverse-complementing a training window (decided per seed, epoch and window)."""
    seed: int = checked(0, integer(0, 2**32 - 1))
    """Seed of the shuffle, augmentation and subsampling."""
    fold_lowercase: bool = checked(True, boolean())
    """Read soft-masked (lowercase) bases as upper case."""
    cache_dir: str | None = checked(None, folder())
    """Where scans, indexes and decompressed copies go (default: beside the FASTA, else the user cache)."""
    max_train_windows: int | None = checked(None, integer(1, optional=True))
    """Use at most this many training windows (rows, with ``packing``), a seeded subsample (quick runs)."""
    mutation_prob: float = checked(0.0, _SHARE)
    """Share of training input bases replaced by another base (labels untouched): a denoising
    regulariser for small genomes."""
    test_contigs: list[str] | None = checked(None, _NAMES)
    """Contigs held out whole for test (instead of ``test_fraction``)."""
    test_fraction: float = checked(0.0, _SHARE)
    """Share of every contig held out for test, just before the validation stretch."""
    val_files: list[str] | None = checked(None, _NAMES)
    """Files (label, name or path) held out whole for validation."""
    test_files: list[str] | None = checked(None, _NAMES)
    """Files (label, name or path) held out whole for test, e.g. unseen strains."""
    file_weights: dict[str, float] | None = checked(None, _file_weights)
    """Relative sampling weight per training file (label, name or path; default 1, 0 leaves it out)."""
    sampling_temperature: float = checked(1.0, real(0.0, lo_open=True))
    """A file's share of training windows grows as its size ** (1 / T): 1 samples by size, larger
    values move towards every genome equally often."""
    packing: bool = checked(True, boolean())
    """Pack training, validation and test rows with whole short records and pieces (at most
    ``seq_length`` bases) of long contigs, the last piece of a contig included, each piece its own
    document (``position_ids`` restart at 0, attention stays inside it). On by default because fixed
    windows silently leave out every record shorter than ``seq_length`` (plasmids, phages, draft and
    metagenomic contigs) and the end of every long contig; for one complete genome the rows are the
    same windows plus a few packed contig ends. False: fixed windows, as ``predict`` always reads."""

    def __post_init__(self) -> None:
        check_fields(self)
        held_out_cuts(self.val_fraction, self.test_fraction, self.val_contigs, self.test_contigs)

    @classmethod
    def from_mapping(cls, saved: Mapping[str, Any], **overrides: Any) -> DataConfig:
        """Settings as a checkpoint records them (``datamodule_hyper_parameters``): keys this
        version does not know are ignored, ``overrides`` win. A record without ``packing`` was
        written before packing existed, by a run that trained on fixed windows: it reads as
        ``packing=False``, so that its held-out numbers stay comparable."""
        known = {f.name for f in fields(cls)}
        given = {**saved, **overrides}
        given.setdefault("packing", False)
        return cls(**{k: v for k, v in given.items() if k in known})

    @property
    def has_val_split(self) -> bool:
        """Whether anything is held out for validation."""
        return bool(self.val_contigs or self.val_files or self.val_fraction)

    @property
    def has_test_split(self) -> bool:
        """Whether a test split distinct from validation is configured."""
        return bool(self.test_contigs or self.test_files or self.test_fraction)


def check_settings(**values: Any) -> None:
    """Check data settings given one by one (``check_settings(seq_length=0)`` raises
    ``data.seq_length: must be >= 1, got 0``): the ranges of :class:`DataConfig`, for code that
    takes a few of them without a whole config (a dataset, the split function)."""
    check_values(DataConfig.key_prefix, field_checks(DataConfig), values)


def held_out_cuts(val_fraction: float, test_fraction: float, val_contigs: Sequence[str] | None,
                  test_contigs: Sequence[str] | None) -> tuple[float, float]:
    """The shares of every contig cut off for validation and test: a split's fraction applies only
    where no contigs are named for it, and together they must leave something to train on."""
    val_cut = 0.0 if val_contigs else float(val_fraction)
    test_cut = 0.0 if test_contigs else float(test_fraction)
    if val_cut + test_cut >= 1.0:
        raise ConfigError(f"data.val_fraction + data.test_fraction must be below 1, got {val_cut + test_cut}")
    return val_cut, test_cut


_F = TypeVar("_F", bound=Callable[..., Any])


def takes_fields_of(cls: type) -> Callable[[_F], _F]:
    """Decorator for an ``__init__`` whose keyword arguments are the fields of dataclass ``cls``.

    It appends an ``Args:`` section made of the fields' docstrings (jsonargparse prints those in
    ``--help``) and refuses, when the class is defined, a signature whose names or order differ
    from the fields: the dataclass stays the one place where a setting is described.
    """
    names = [f.name for f in fields(cls)]
    described = {p.arg_name: p.description for p in docstring_parser.parse_from_object(cls).params}

    def decorate(init: _F) -> _F:
        given = [p for p in inspect.signature(init).parameters if p != "self"]
        if given != names:
            found, wanted = next((a, b) for a, b in zip(given + ["<end>"], names + ["<end>"]) if a != b)
            raise TypeError(f"{init.__qualname__} must take the fields of {cls.__name__} in their order: it has "
                            f"{found!r} where {cls.__name__} has {wanted!r}")
        lines = [f"    {name}: {' '.join((described.get(name) or '').split())}" for name in names]
        init.__doc__ = (inspect.cleandoc(init.__doc__ or "") + "\n\nArgs:\n" + "\n".join(lines) + "\n")
        return init

    return decorate
