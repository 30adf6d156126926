"""Windows over a genome for next-base prediction, and the Lightning DataModule.

A training example is a fixed-length window of the genome. Windows are described
by a small table (contig index, start) built once in ``setup()``; sequence is read
lazily through pyfaidx in ``__getitem__``, so memory stays flat for any genome size
and DataLoader workers each open their own file handles.

Splits never share a base (:func:`split_genome`). Whole files can be held out for
validation or test (``val_files``, ``test_files``: strains a model never saw); in the
other files whole contigs are held out (``val_contigs``, ``test_contigs``) or the end of
every contig is: the last ``val_fraction`` for validation and, before it, a
``test_fraction`` stretch for test, with train windows ending before the first cut.

With several files, training windows are drawn per file (:class:`GenomeWeightedSampler`)
when ``sampling_temperature`` or ``file_weights`` ask for shares other than by size, and
every window carries the index of its file (``batch["genome"]``) so that held-out numbers
can be reported per genome.
"""

from __future__ import annotations

import warnings
import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_warn
import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, Sampler

from biomoe.model.config import ConfigError
from biomoe.errors import GenomeInputError
from biomoe.data.fasta import Genome
from biomoe.data.tokenizer import A_ID, BOS_ID, T_ID, NucleotideTokenizer

__all__ = ["Region", "Splits", "GenomeWindowDataset", "GenomeDataModule", "split_genome", "split_regions",
           "file_shares", "EpochSeededRandomSampler", "GenomeWeightedSampler", "ResumableBatchSampler"]

Region = tuple[int, int, int]
"""(contig index, start, end): a half-open stretch of one contig that windows must lie in."""

_SCAN_BLOCK = 8_000_000  # bases read at once when counting ambiguous bases


def _genome_label(genome: Genome) -> str:
    return ", ".join(str(p) for p in genome.paths)


class GenomeWindowDataset(Dataset):
    """Fixed-length windows of a :class:`Genome` as next-token-prediction examples.

    Each item is a dict of tensors, all of length ``seq_length``:

    * ``labels``: the window's token ids (one per base);
    * ``input_ids``: ``[BOS] + labels[:-1]``, so position t predicts base t from bases < t
      and every base of the window is a target;
    * ``loss_mask``: True where the label is A/C/G/T. N, IUPAC codes and UNK are not
      scored: they describe the assembly's uncertainty, not the genome;
    * ``genome`` (with ``tag_genome=True``): a scalar, the index of the window's file in
      ``genome.paths``, which per-genome metrics group by.

    Windows start every ``stride`` bases inside each region; a window with more than
    ``max_n_fraction`` non-ACGT bases is dropped (gaps of N in assemblies would otherwise
    become a trivially predictable, useless signal). Contigs shorter than ``seq_length``
    are skipped with a warning; an empty table raises :class:`GenomeInputError`.

    With ``rc_prob > 0`` a window is reverse-complemented with that probability, decided
    by ``np.random.default_rng((seed, epoch, index))``: the same seed and epoch always
    give the same flips regardless of worker count or sampling order.

    With ``mutation_prob > 0`` each A/C/G/T of ``input_ids`` (never of ``labels``) is
    replaced by one of the three other bases with that probability, from its own
    (seed, epoch, index) stream. The model must then predict the true base from a
    slightly wrong context: a denoising regulariser for small genomes, read many times
    over, where a model otherwise memorises exact contexts. Diverged copies of repeats
    and paralogous genes are the same situation in real sequence. The epoch lives in
    a shared-memory tensor, so :meth:`set_epoch` in the main process also reaches
    persistent DataLoader workers.
    """

    def __init__(
        self,
        genome: Genome,
        seq_length: int,
        stride: int | None = None,
        max_n_fraction: float = 0.1,
        regions: Sequence[Region] | None = None,
        rc_prob: float = 0.0,
        seed: int = 0,
        tokenizer: NucleotideTokenizer | None = None,
        max_windows: int | None = None,
        split: str = "train",
        mutation_prob: float = 0.0,
        tag_genome: bool = False,
    ) -> None:
        if seq_length < 1:
            raise ConfigError(f"data.seq_length must be >= 1, got {seq_length}")
        stride = seq_length if stride is None else stride
        if stride < 1:
            raise ConfigError(f"data.stride must be >= 1, got {stride}")
        if not 0.0 <= max_n_fraction <= 1.0:
            raise ConfigError(f"data.max_n_fraction must be in [0, 1], got {max_n_fraction}")
        if not 0.0 <= rc_prob <= 1.0:
            raise ConfigError(f"data.rc_prob must be in [0, 1], got {rc_prob}")
        if not 0.0 <= mutation_prob < 1.0:
            raise ConfigError(f"data.mutation_prob must be in [0, 1), got {mutation_prob}")
        self.genome = genome
        self.seq_length = int(seq_length)
        self.stride = int(stride)
        self.max_n_fraction = float(max_n_fraction)
        self.rc_prob = float(rc_prob)
        self.mutation_prob = float(mutation_prob)
        self.seed = int(seed)
        self.split = split
        self.tag_genome = bool(tag_genome)
        self.tokenizer = tokenizer or NucleotideTokenizer()
        if regions is None:
            regions = [(i, 0, c.length) for i, c in enumerate(genome.contigs)]
        self.contig_index, self.starts = self._build_table(regions)
        if max_windows is not None and len(self.starts) > max_windows:
            keep = np.sort(np.random.default_rng(self.seed).choice(len(self.starts), max_windows, replace=False))
            self.contig_index, self.starts = self.contig_index[keep], self.starts[keep]
        self._file_of_contig = np.array([c.file_index for c in genome.contigs], dtype=np.int64)
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_()
        self._epochs_started = 0
        self.epoch_source: Callable[[], int | None] | None = None

    # -- window table -----------------------------------------------------------------
    def _build_table(self, regions: Sequence[Region]) -> tuple[np.ndarray, np.ndarray]:
        seq_len = self.seq_length
        contig_parts: list[np.ndarray] = []
        start_parts: list[np.ndarray] = []
        short: list[str] = []
        candidates = 0
        for contig, lo, hi in regions:
            info = self.genome.contigs[contig]
            if info.length < seq_len:
                short.append(info.name)
                continue
            starts = np.arange(lo, hi - seq_len + 1, self.stride, dtype=np.int64)
            if starts.size == 0:
                continue
            candidates += starts.size
            keep = self._few_ambiguous(contig, starts)
            start_parts.append(starts[keep])
            contig_parts.append(np.full(int(keep.sum()), contig, dtype=np.int64))
        for name in short:
            warnings.warn(
                f"{self.split}: skipping contig '{name}' "
                f"({self.genome.contig(name).length:,} bp < seq_length {seq_len:,})",
                stacklevel=3,
            )
        contig_index = np.concatenate(contig_parts) if contig_parts else np.zeros(0, dtype=np.int64)
        starts_all = np.concatenate(start_parts) if start_parts else np.zeros(0, dtype=np.int64)
        if starts_all.size == 0:
            if candidates:
                why = (
                    f"all {candidates:,} windows have more than {self.max_n_fraction:.0%} N/ambiguous bases "
                    "(is the genome all N?)"
                )
            elif short and len(short) == len(regions):
                why = f"every contig is shorter than seq_length {seq_len:,}"
            else:
                why = f"no room for a window of {seq_len:,} bases in the {self.split} region(s)"
            raise GenomeInputError(_genome_label(self.genome), f"no {self.split} windows: {why}")
        return contig_index, starts_all

    def _few_ambiguous(self, contig: int, starts: np.ndarray) -> np.ndarray:
        """Boolean mask over ``starts``: windows with at most max_n_fraction non-ACGT bases."""
        seq_len = self.seq_length
        limit = self.max_n_fraction * seq_len
        keep = np.zeros(starts.size, dtype=bool)
        block = max(_SCAN_BLOCK, seq_len)
        begin = 0
        while begin < starts.size:
            first = int(starts[begin])
            end = int(np.searchsorted(starts, first + block, side="left"))
            end = max(end, begin + 1)
            span_end = int(starts[end - 1]) + seq_len
            ids = self.tokenizer.encode(self.genome.fetch(contig, first, span_end))
            bad = np.concatenate(([0], np.cumsum(~self.tokenizer.unambiguous_mask(ids), dtype=np.int64)))
            rel = starts[begin:end] - first
            keep[begin:end] = (bad[rel + seq_len] - bad[rel]) <= limit
            begin = end
        return keep

    # -- epochs and augmentation ------------------------------------------------------
    @property
    def epoch(self) -> int:
        return int(self._epoch.item())

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch used to seed reverse-complement flips (visible to workers)."""
        self._epoch.fill_(int(epoch))

    def start_epoch(self) -> None:
        """Called when a DataLoader starts iterating: take the epoch from ``epoch_source``
        (the trainer) when available, else count iterations."""
        epoch = self.epoch_source() if self.epoch_source is not None else None
        self.set_epoch(self._epochs_started if epoch is None else epoch)
        self._epochs_started += 1

    def is_reverse_complemented(self, index: int) -> bool:
        """Whether item ``index`` is reverse-complemented in the current epoch."""
        if self.rc_prob <= 0.0:
            return False
        rng = np.random.default_rng((self.seed, self.epoch, int(index)))
        return bool(rng.random() < self.rc_prob)

    def mutate(self, ids: np.ndarray, index: int) -> np.ndarray:
        """A copy of ``ids`` with each A/C/G/T swapped for another base with probability
        ``mutation_prob``; N, IUPAC codes and specials are left alone. Deterministic in
        (seed, epoch, index), like the reverse-complement flips."""
        if self.mutation_prob <= 0.0:
            return ids
        rng = np.random.default_rng((self.seed, self.epoch, int(index), 1))
        hit = (rng.random(ids.shape) < self.mutation_prob) & (ids >= A_ID) & (ids <= T_ID)
        shift = rng.integers(1, 4, size=ids.shape)  # 1..3: always a different base
        out = ids.copy()
        out[hit] = A_ID + (ids[hit] - A_ID + shift[hit]) % 4
        return out

    # -- Dataset protocol -------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.starts.size)

    def window(self, index: int) -> tuple[str, int, int]:
        """(contig name, start, end) of window ``index`` on the forward strand."""
        start = int(self.starts[index])
        return self.genome.contigs[int(self.contig_index[index])].name, start, start + self.seq_length

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if index < 0:
            index += len(self)
        contig = int(self.contig_index[index])
        start = int(self.starts[index])
        ids = self.tokenizer.encode(self.genome.fetch(contig, start, start + self.seq_length))
        if self.is_reverse_complemented(index):
            ids = self.tokenizer.reverse_complement(ids)
        labels = torch.from_numpy(np.ascontiguousarray(ids))
        input_ids = torch.empty_like(labels)
        input_ids[0] = BOS_ID
        input_ids[1:] = torch.from_numpy(np.ascontiguousarray(self.mutate(ids[:-1], index)))
        item = {"input_ids": input_ids, "labels": labels, "loss_mask": self.tokenizer.unambiguous_mask(labels)}
        if self.tag_genome:
            item["genome"] = torch.tensor(int(self._file_of_contig[contig]))
        return item

    @property
    def file_index(self) -> np.ndarray:
        """Per window, the index of its file in ``genome.paths``."""
        return self._file_of_contig[self.contig_index]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["epoch_source"] = None  # usually a bound method of the DataModule/trainer
        return state


@dataclass
class Splits:
    """Train, validation and test regions of one genome; no base is in two of them."""

    train: list[Region]
    val: list[Region]
    test: list[Region]


def match_files(genome: Genome, keys: Sequence[str] | None, key: str) -> list[int]:
    """Indices into ``genome.paths`` of the files that ``keys`` name.

    A file is named by its label (``ecoli_536`` for ``ecoli_536.fna.gz``, see
    :func:`~biomoe.data.fasta.file_labels`), its file name, or its path. ``key`` is the
    setting being read, for the error message.
    """
    found: list[int] = []
    for wanted in keys or []:
        text = str(wanted)
        resolved = Path(text).expanduser().resolve()
        hits = [i for i, (label, path) in enumerate(zip(genome.labels, genome.paths))
                if text in (label, path.name, str(path)) or resolved == path.resolve()]
        if not hits:
            raise GenomeInputError(_genome_label(genome), f"data.{key}: no FASTA file '{text}' among the inputs "
                                                          f"(files: {', '.join(genome.labels)})")
        found.extend(h for h in hits if h not in found)
    return found


def _contig_indices(genome: Genome, names: Sequence[str], key: str) -> list[int]:
    indices = []
    for name in names:
        if name in genome:
            indices.append(genome.index_of(name))
            continue
        namespaced = [c.name for c in genome.contigs if c.record == name]
        if namespaced:
            raise GenomeInputError(_genome_label(genome), f"{key}: contig '{name}' is in several files; name one of "
                                                          f"{', '.join(namespaced)}")
        known = ", ".join(genome.names[:10]) + (" ..." if len(genome.names) > 10 else "")
        raise GenomeInputError(_genome_label(genome), f"{key}: unknown contig '{name}' (contigs: {known})")
    return indices


def split_genome(
    genome: Genome,
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
    label = _genome_label(genome)
    for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0.0 <= value < 1.0:
            raise ConfigError(f"data.{name} must be in [0, 1), got {value}")
    held_val, held_test = set(match_files(genome, val_files, "val_files")), set(match_files(genome, test_files, "test_files"))
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
                                          f"data.test_contigs but its file '{genome.labels[file_index]}' is held out whole")
    val_cut = 0.0 if val_contigs else float(val_fraction)
    test_cut = 0.0 if test_contigs else float(test_fraction)
    if val_cut + test_cut >= 1.0:
        raise ConfigError(f"data.val_fraction + data.test_fraction must be below 1, got {val_cut + test_cut}")
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
        what = "the held-out files and contigs cover" if (val_files or test_files or val_contigs or test_contigs) else "the split covers"
        raise GenomeInputError(label, f"{what} every contig; nothing is left to train on")
    return splits


def split_regions(
    genome: Genome, val_contigs: Sequence[str] | None, val_fraction: float
) -> tuple[list[Region], list[Region]]:
    """Train and validation regions that share no base (:func:`split_genome` without test).

    With ``val_contigs`` the named contigs are validation and the rest train (unknown
    names raise GenomeInputError). Otherwise each contig is cut at
    ``floor(length * (1 - val_fraction))``: train is before the cut, validation after.
    """
    splits = split_genome(genome, val_contigs=val_contigs, val_fraction=val_fraction)
    return splits.train, splits.val


def file_shares(window_files: np.ndarray, num_files: int, temperature: float = 1.0,
                weights: Sequence[float] | None = None) -> np.ndarray:
    """Probability of drawing a training window from each file.

    File ``f`` with ``n_f`` training windows gets a share proportional to
    ``weights[f] * n_f ** (1 / temperature)``: temperature 1 is sampling by size (every
    window equally likely, as without weights), larger temperatures flatten towards every
    genome equally often (the temperature sampling of multilingual language models), and
    ``weights`` scale files on top (0 leaves a file out of training).
    """
    counts = np.bincount(window_files, minlength=num_files).astype(np.float64)
    if not temperature > 0:
        raise ConfigError(f"data.sampling_temperature must be > 0, got {temperature}")
    scale = np.ones(num_files) if weights is None else np.asarray(weights, dtype=np.float64)
    shares = np.where(counts > 0, counts ** (1.0 / temperature), 0.0) * scale
    if not shares.sum() > 0:
        raise ConfigError("data.file_weights: every file with training windows has weight 0")
    return shares / shares.sum()


class EpochSeededRandomSampler(RandomSampler):
    """A shuffle whose order is a pure function of ``(seed, epoch)``.

    ``RandomSampler`` draws its seed from the global torch RNG when iterated, so a run
    resumed from a checkpoint (fresh process, different RNG history) would see another
    order. Here :meth:`set_epoch` (called by Lightning, and by the loader from the
    dataset's epoch) selects the permutation. Subclassing ``RandomSampler`` tells
    Lightning the loader shuffles, so under DDP it is replaced by a ``DistributedSampler``
    (itself seeded by ``(seed, epoch)``).
    """

    def __init__(self, data_source: Sized, seed: int = 0) -> None:
        super().__init__(data_source)
        self.seed = int(seed)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        yield from torch.randperm(len(self.data_source), generator=generator).tolist()


class GenomeWeightedSampler(Sampler[int]):
    """Draws ``len(dataset)`` training windows per epoch, first a file by its share, then a
    window of that file uniformly: per-genome sampling that does not depend on how many
    windows each genome has.

    The draw is a pure function of ``(seed, epoch)``; the epoch is read from the dataset
    (which the loader sets when a pass starts), so it also advances when Lightning wraps
    this sampler for distributed training (``DistributedSamplerWrapper`` re-iterates it
    every epoch and splits the draw between ranks). Windows are drawn with replacement:
    a small genome given a large share is read several times per epoch.
    """

    def __init__(self, dataset: GenomeWindowDataset, shares: np.ndarray, seed: int = 0) -> None:
        self.dataset = dataset
        self.seed = int(seed)
        self.epoch = 0
        self.shares = np.asarray(shares, dtype=np.float64)
        files = dataset.file_index
        self._order = np.argsort(files, kind="stable")  # window indices grouped by file
        counts = np.bincount(files, minlength=len(self.shares))
        self._counts = counts
        self._offsets = np.concatenate(([0], np.cumsum(counts)[:-1]))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.dataset)

    def __iter__(self) -> Iterator[int]:
        epoch = getattr(self.dataset, "epoch", self.epoch)
        rng = np.random.default_rng((self.seed, int(epoch), 2))
        files = rng.choice(len(self.shares), size=len(self.dataset), p=self.shares)
        within = (rng.random(len(files)) * self._counts[files]).astype(np.int64)
        yield from self._order[self._offsets[files] + within].tolist()


class ResumableBatchSampler(BatchSampler):
    """``BatchSampler`` that can start its next pass ``n`` batches in (see :meth:`skip_next`).

    Skipping happens on indices, so no window is read for the batches already trained on.
    It wraps whatever sampler it is given (Lightning re-creates it around a
    ``DistributedSampler`` under DDP), so skipping is per rank, which is what each rank
    consumed. The count of batches to skip comes from the loader's checkpoint state.
    """

    _skip = 0

    def skip_next(self, batches: int) -> None:
        """Drop the first ``batches`` batches of the next pass only."""
        self._skip = int(batches)

    def __iter__(self) -> Iterator[list[int]]:
        skip, self._skip = self._skip, 0
        batches = super().__iter__()
        for _ in range(skip):
            if next(batches, None) is None:
                return
        yield from batches


class _EpochAwareDataLoader(DataLoader):
    """DataLoader that tells its dataset a new epoch starts each time it is iterated.

    Lightning iterates the train loader once per epoch (creating the iterator in the
    main process before any worker receives indices), so this is the one place where
    the epoch can be set reliably, also with ``persistent_workers``. No custom
    ``__init__``: Lightning can re-create it with a DistributedSampler.

    It is also resumable mid-epoch: :meth:`state_dict` (saved by Lightning in every
    checkpoint, under ``loops.fit_loop.state_dict.combined_loader``) records the epoch and
    how many batches this pass has yielded; after :meth:`load_state_dict` the next pass
    of the same epoch skips those batches, so a resumed run sees exactly the batches the
    uninterrupted run would have. Lightning does not prefetch from loaders with a length,
    so yielded batches are the batches trained on.
    """

    _yielded = 0
    _resume: dict[str, int] | None = None

    def state_dict(self) -> dict[str, int]:
        epoch = getattr(self.dataset, "epoch", 0)
        return {"epoch": int(epoch), "batches": int(self._yielded)}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._resume = dict(state)

    def __iter__(self) -> Iterator[Any]:
        start_epoch = getattr(self.dataset, "start_epoch", None)
        if callable(start_epoch):
            start_epoch()
        epoch = getattr(self.dataset, "epoch", None)
        sampler = getattr(self.batch_sampler, "sampler", None)
        if epoch is not None and callable(getattr(sampler, "set_epoch", None)):
            sampler.set_epoch(epoch)  # same value Lightning sets; also right outside Lightning
        skip, self._resume = self._resume_skip(epoch), None
        if skip and isinstance(self.batch_sampler, ResumableBatchSampler):
            self.batch_sampler.skip_next(skip)
        else:
            skip = 0
        self._yielded = skip
        return self._counting(super().__iter__())

    def _resume_skip(self, epoch: int | None) -> int:
        state = self._resume
        if state is None or epoch is None or int(state.get("epoch", -1)) != int(epoch):
            return 0  # resumed at an epoch boundary: the new epoch starts from its beginning
        return int(state.get("batches", 0))

    def _counting(self, batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            self._yielded += 1
            yield batch


class GenomeDataModule(L.LightningDataModule):
    """Train/validation/test windows over one or more FASTA files.

    ``setup()`` opens the genome (validated and indexed, see :mod:`biomoe.data.fasta`) and
    builds the window tables from :func:`split_genome`. Held-out splits are read with
    stride ``seq_length`` and no reverse complement; ``predict`` reads the validation split.
    ``test`` reads the test split; without one configured it reads the validation split
    and says so. ``val_fraction=0`` and no ``val_contigs``/``val_files`` disables
    validation.

    Reverse-complement flips and mutations depend on (seed, epoch, index); the epoch is
    taken from ``trainer.current_epoch`` each time the train loader is iterated, so resumed
    runs continue the same augmentation sequence.
    """

    def __init__(
        self,
        fasta: str | list[str] = "data/lambda_virus.fa.gz",
        seq_length: int = 1024,
        stride: int | None = None,
        batch_size: int = 8,
        num_workers: int = 0,
        val_contigs: list[str] | None = None,
        val_fraction: float = 0.1,
        max_n_fraction: float = 0.1,
        rc_prob: float = 0.5,
        seed: int = 0,
        fold_lowercase: bool = True,
        cache_dir: str | None = None,
        max_train_windows: int | None = None,
        mutation_prob: float = 0.0,
        test_contigs: list[str] | None = None,
        test_fraction: float = 0.0,
        val_files: list[str] | None = None,
        test_files: list[str] | None = None,
        file_weights: dict[str, float] | None = None,
        sampling_temperature: float = 1.0,
    ) -> None:
        """
        Args:
            fasta: FASTA file(s) or folder(s) (plain, gzip or bgzip); several files are one
                training set, each file a genome for sampling and per-genome metrics.
            seq_length: bases per training window (the model's context).
            stride: distance between training window starts (default ``seq_length``).
            batch_size: windows per batch and device.
            num_workers: DataLoader worker processes.
            val_contigs: contigs held out whole for validation (instead of ``val_fraction``).
            val_fraction: share at the end of every contig held out for validation.
            max_n_fraction: windows with more N/ambiguous bases than this share are dropped.
            rc_prob: probability of reverse-complementing a training window.
            seed: seed of the shuffle, augmentation and subsampling.
            fold_lowercase: read soft-masked (lowercase) bases as upper case.
            cache_dir: where scans, indexes and decompressed copies go (default: beside the FASTA).
            max_train_windows: use at most this many training windows (quick runs).
            mutation_prob: share of training input bases replaced by another base (labels untouched).
            test_contigs: contigs held out whole for test (instead of ``test_fraction``).
            test_fraction: share of every contig held out for test, just before the validation stretch.
            val_files: files (label, name or path) held out whole for validation.
            test_files: files (label, name or path) held out whole for test, e.g. unseen strains.
            file_weights: relative sampling weight per training file (label, name or path; default 1).
            sampling_temperature: a file's share of training windows grows as its size ** (1 / T):
                1 samples by size, larger values move towards every genome equally often.
        """
        super().__init__()
        if batch_size < 1:
            raise ConfigError(f"data.batch_size must be >= 1, got {batch_size}")
        if num_workers < 0:
            raise ConfigError(f"data.num_workers must be >= 0, got {num_workers}")
        if max_train_windows is not None and max_train_windows < 1:
            raise ConfigError(f"data.max_train_windows must be >= 1 or null, got {max_train_windows}")
        if not sampling_temperature > 0:
            raise ConfigError(f"data.sampling_temperature must be > 0, got {sampling_temperature}")
        for key, weight in (file_weights or {}).items():
            if not (isinstance(weight, (int, float)) and weight >= 0 and np.isfinite(weight)):
                raise ConfigError(f"data.file_weights.{key} must be a finite number >= 0, got {weight}")
        self.save_hyperparameters()
        self.fasta = fasta
        self.seq_length = seq_length
        self.stride = stride
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.val_contigs = val_contigs
        self.val_fraction = val_fraction
        self.max_n_fraction = max_n_fraction
        self.rc_prob = rc_prob
        self.seed = seed
        self.cache_dir = cache_dir
        self.max_train_windows = max_train_windows
        self.mutation_prob = mutation_prob
        self.test_contigs = test_contigs
        self.test_fraction = test_fraction
        self.val_files = val_files
        self.test_files = test_files
        self.file_weights = file_weights
        self.sampling_temperature = sampling_temperature
        self.tokenizer = NucleotideTokenizer(fold_lowercase=fold_lowercase)
        self.vocab_size: int = self.tokenizer.padded_vocab_size
        self.genome: Genome | None = None
        self.splits: Splits | None = None
        self.train_dataset: GenomeWindowDataset | None = None
        self.val_dataset: GenomeWindowDataset | None = None
        self._test_dataset: GenomeWindowDataset | None = None
        self.shares: np.ndarray | None = None

    @classmethod
    def from_hparams(cls, saved: Mapping[str, Any], **overrides: Any) -> GenomeDataModule:
        """A datamodule with the settings a checkpoint recorded (``datamodule_hyper_parameters``);
        keys this version does not know are ignored, ``overrides`` win."""
        known = set(inspect.signature(cls.__init__).parameters) - {"self"}
        return cls(**{k: v for k, v in {**saved, **overrides}.items() if k in known})

    def prepare_data(self) -> None:
        """Validate, decompress and index once per node before ranks start reading."""
        Genome(self.fasta, cache_dir=self.cache_dir)

    @property
    def has_test_split(self) -> bool:
        """Whether a test split distinct from validation is configured."""
        return bool(self.test_contigs or self.test_files or self.test_fraction)

    @property
    def has_val_split(self) -> bool:
        return bool(self.val_contigs or self.val_files or self.val_fraction)

    def setup(self, stage: str | None = None) -> None:
        if self.genome is not None:
            return
        genome = Genome(self.fasta, cache_dir=self.cache_dir)
        splits = split_genome(genome, val_contigs=self.val_contigs, val_fraction=self.val_fraction,
                              test_contigs=self.test_contigs, test_fraction=self.test_fraction,
                              val_files=self.val_files, test_files=self.test_files)
        self.train_dataset = GenomeWindowDataset(
            genome,
            self.seq_length,
            stride=self.stride,
            max_n_fraction=self.max_n_fraction,
            regions=splits.train,
            rc_prob=self.rc_prob,
            seed=self.seed,
            tokenizer=self.tokenizer,
            max_windows=self.max_train_windows,
            split="train",
            mutation_prob=self.mutation_prob,
        )
        self.train_dataset.epoch_source = self._current_epoch
        self.val_dataset = self._held_out(genome, splits.val, "validation")
        self._test_dataset = self._held_out(genome, splits.test, "test")
        self.shares = self._file_shares(genome, self.train_dataset)
        self.splits = splits
        self.genome = genome

    def _held_out(self, genome: Genome, regions: list[Region], split: str) -> GenomeWindowDataset | None:
        if not regions:
            return None
        return GenomeWindowDataset(genome, self.seq_length, stride=self.seq_length, max_n_fraction=self.max_n_fraction,
                                   regions=regions, rc_prob=0.0, seed=self.seed, tokenizer=self.tokenizer, split=split,
                                   tag_genome=True)

    def _file_shares(self, genome: Genome, train: GenomeWindowDataset) -> np.ndarray | None:
        """Per-file shares of training windows, or None where they are simply by size."""
        weights = np.ones(len(genome.paths))
        for key, weight in (self.file_weights or {}).items():
            for index in match_files(genome, [key], "file_weights"):
                weights[index] = float(weight)
        if self.sampling_temperature == 1.0 and np.all(weights == 1.0):
            return None
        return file_shares(train.file_index, len(genome.paths), self.sampling_temperature, weights)

    def _current_epoch(self) -> int | None:
        trainer = getattr(self, "trainer", None)
        return None if trainer is None else int(trainer.current_epoch)

    # -- what the splits hold (for schedules, baselines and reports) ---------------------
    @property
    def train_regions(self) -> list[Region]:
        """Training regions (after :meth:`setup`): what baselines may be fitted on."""
        return self._set_up().train

    @property
    def train_bases(self) -> int:
        """Bases in the training regions (one pass over the training split)."""
        return sum(hi - lo for _, lo, hi in self._set_up().train)

    @property
    def genome_labels(self) -> list[str]:
        """One label per FASTA file, as in ``val/<label>/bits_per_base``."""
        if self.genome is None:
            raise RuntimeError("call setup() first")
        return list(self.genome.labels)

    def _set_up(self) -> Splits:
        if self.splits is None:
            raise RuntimeError("call setup() first")
        return self.splits

    @property
    def test_dataset(self) -> GenomeWindowDataset | None:
        """The test split, or the validation split where none is configured."""
        return self._test_dataset if self._test_dataset is not None else self.val_dataset

    def _loader(self, dataset: GenomeWindowDataset, shuffle: bool, cls: type[DataLoader] = DataLoader) -> DataLoader:
        if shuffle:  # seeded, resumable order (see EpochSeededRandomSampler, ResumableBatchSampler)
            sampler: Sampler[int] = (EpochSeededRandomSampler(dataset, seed=self.seed) if self.shares is None
                                     else GenomeWeightedSampler(dataset, self.shares, seed=self.seed))
            batching: dict[str, Any] = {"batch_sampler": ResumableBatchSampler(sampler, self.batch_size, False)}
        else:
            batching = {"batch_size": self.batch_size, "shuffle": False}
        return cls(
            dataset,
            **batching,
            # Own generator: iterating a loader draws a worker base seed; from the global RNG
            # that draw would shift every later random number when a resumed run iterates anew.
            generator=torch.Generator().manual_seed(self.seed),
            num_workers=self.num_workers,
            pin_memory=torch.cuda.is_available(),
            persistent_workers=self.num_workers > 0,
        )

    def _require(self, dataset: GenomeWindowDataset | None, what: str) -> GenomeWindowDataset:
        if self.genome is None:
            raise RuntimeError(f"call setup() before {what}_dataloader()")
        if dataset is None:
            raise RuntimeError("validation is disabled (val_fraction=0 and no val_contigs or val_files)")
        return dataset

    def train_dataloader(self) -> DataLoader:
        return self._loader(self._require(self.train_dataset, "train"), shuffle=True, cls=_EpochAwareDataLoader)

    def val_dataloader(self) -> DataLoader | list[DataLoader]:
        if self.genome is not None and self.val_dataset is None:
            return []  # Lightning skips validation for an empty list
        return self._loader(self._require(self.val_dataset, "val"), shuffle=False)

    def test_dataloader(self) -> DataLoader:
        if self.genome is not None and self._test_dataset is None:
            rank_zero_warn("no test split is configured (data.test_fraction, data.test_contigs or data.test_files): "
                           "testing on the validation split")
        return self._loader(self._require(self.test_dataset, "test"), shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self._require(self.val_dataset, "predict"), shuffle=False)
