"""Windows over a genome for next-base prediction, and the Lightning DataModule.

A training example is a fixed-length window of the genome. Windows are described
by a small table (contig index, start) built once in ``setup()``; sequence is read
lazily through pyfaidx in ``__getitem__``, so memory stays flat for any genome size
and DataLoader workers each open their own file handles.

Splits never share a base: either whole contigs are held out (``val_contigs``) or the
last ``val_fraction`` of every contig is, with train windows ending before the cut
and validation windows starting after it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence, Sized
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

from biomoe.model.config import ConfigError
from biomoe.errors import GenomeInputError
from biomoe.data.fasta import Genome
from biomoe.data.tokenizer import A_ID, BOS_ID, T_ID, NucleotideTokenizer

__all__ = ["Region", "GenomeWindowDataset", "GenomeDataModule", "split_regions",
           "EpochSeededRandomSampler", "ResumableBatchSampler"]

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
      scored: they describe the assembly's uncertainty, not the genome.

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
        self.tokenizer = tokenizer or NucleotideTokenizer()
        if regions is None:
            regions = [(i, 0, c.length) for i, c in enumerate(genome.contigs)]
        self.contig_index, self.starts = self._build_table(regions)
        if max_windows is not None and len(self.starts) > max_windows:
            keep = np.sort(np.random.default_rng(self.seed).choice(len(self.starts), max_windows, replace=False))
            self.contig_index, self.starts = self.contig_index[keep], self.starts[keep]
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
        return {"input_ids": input_ids, "labels": labels, "loss_mask": self.tokenizer.unambiguous_mask(labels)}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["epoch_source"] = None  # usually a bound method of the DataModule/trainer
        return state


def split_regions(
    genome: Genome, val_contigs: Sequence[str] | None, val_fraction: float
) -> tuple[list[Region], list[Region]]:
    """Train and validation regions that share no base.

    With ``val_contigs`` the named contigs are validation and the rest train (unknown
    names raise GenomeInputError). Otherwise each contig is cut at
    ``floor(length * (1 - val_fraction))``: train is before the cut, validation after.
    """
    label = _genome_label(genome)
    if val_contigs:
        unknown = [n for n in val_contigs if n not in genome]
        if unknown:
            known = ", ".join(genome.names[:10]) + (" ..." if len(genome.names) > 10 else "")
            raise GenomeInputError(label, f"val_contigs: unknown contig '{unknown[0]}' (contigs: {known})")
        held = set(val_contigs)
        train = [(i, 0, c.length) for i, c in enumerate(genome.contigs) if c.name not in held]
        val = [(i, 0, c.length) for i, c in enumerate(genome.contigs) if c.name in held]
        if not train:
            raise GenomeInputError(label, "val_contigs holds out every contig; nothing is left to train on")
        return train, val
    if not 0.0 <= val_fraction < 1.0:
        raise ConfigError(f"data.val_fraction must be in [0, 1), got {val_fraction}")
    train, val = [], []
    for i, c in enumerate(genome.contigs):
        cut = int(c.length * (1.0 - val_fraction))
        train.append((i, 0, cut))
        if cut < c.length:
            val.append((i, cut, c.length))
    return train, val


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
    builds the window tables. Validation (also used for ``test`` and ``predict``) is
    either the named ``val_contigs`` or the last ``val_fraction`` of every contig,
    read with stride ``seq_length`` and no reverse complement. ``val_fraction=0`` and no
    ``val_contigs`` disables validation. ``max_train_windows`` subsamples the training
    table (deterministically from ``seed``) for quick runs.

    Reverse-complement flips depend on (seed, epoch, index); the epoch is taken from
    ``trainer.current_epoch`` each time the train loader is iterated, so resumed runs
    continue the same augmentation sequence.
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
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise ConfigError(f"data.batch_size must be >= 1, got {batch_size}")
        if num_workers < 0:
            raise ConfigError(f"data.num_workers must be >= 0, got {num_workers}")
        if max_train_windows is not None and max_train_windows < 1:
            raise ConfigError(f"data.max_train_windows must be >= 1 or null, got {max_train_windows}")
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
        self.tokenizer = NucleotideTokenizer(fold_lowercase=fold_lowercase)
        self.vocab_size: int = self.tokenizer.padded_vocab_size
        self.genome: Genome | None = None
        self.train_dataset: GenomeWindowDataset | None = None
        self.val_dataset: GenomeWindowDataset | None = None

    def prepare_data(self) -> None:
        """Validate, decompress and index once per node before ranks start reading."""
        Genome(self.fasta, cache_dir=self.cache_dir)

    def setup(self, stage: str | None = None) -> None:
        if self.genome is not None:
            return
        genome = Genome(self.fasta, cache_dir=self.cache_dir)
        train_regions, val_regions = split_regions(genome, self.val_contigs, self.val_fraction)
        self.train_dataset = GenomeWindowDataset(
            genome,
            self.seq_length,
            stride=self.stride,
            max_n_fraction=self.max_n_fraction,
            regions=train_regions,
            rc_prob=self.rc_prob,
            seed=self.seed,
            tokenizer=self.tokenizer,
            max_windows=self.max_train_windows,
            split="train",
            mutation_prob=self.mutation_prob,
        )
        self.train_dataset.epoch_source = self._current_epoch
        if val_regions:
            self.val_dataset = GenomeWindowDataset(
                genome,
                self.seq_length,
                stride=self.seq_length,
                max_n_fraction=self.max_n_fraction,
                regions=val_regions,
                rc_prob=0.0,
                seed=self.seed,
                tokenizer=self.tokenizer,
                split="validation",
            )
        self.genome = genome

    def _current_epoch(self) -> int | None:
        trainer = getattr(self, "trainer", None)
        return None if trainer is None else int(trainer.current_epoch)

    @property
    def test_dataset(self) -> GenomeWindowDataset | None:
        """The test split is the validation split (for ``trainer.test``)."""
        return self.val_dataset

    def _loader(self, dataset: Dataset, shuffle: bool, cls: type[DataLoader] = DataLoader) -> DataLoader:
        if shuffle:  # seeded, resumable order (see EpochSeededRandomSampler, ResumableBatchSampler)
            sampler = EpochSeededRandomSampler(dataset, seed=self.seed)
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
            raise RuntimeError("validation is disabled (val_fraction=0 and no val_contigs)")
        return dataset

    def train_dataloader(self) -> DataLoader:
        return self._loader(self._require(self.train_dataset, "train"), shuffle=True, cls=_EpochAwareDataLoader)

    def val_dataloader(self) -> DataLoader | list[DataLoader]:
        if self.genome is not None and self.val_dataset is None:
            return []  # Lightning skips validation for an empty list
        return self._loader(self._require(self.val_dataset, "val"), shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self._require(self.val_dataset, "test"), shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self._require(self.val_dataset, "predict"), shuffle=False)
