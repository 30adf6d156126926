"""The Lightning DataModule: train, validation and test windows over one or more genome files.

The settings are :class:`~biomoe.data.config.DataConfig`'s fields, taken as keyword arguments so
that the command line and configs set them as ``data.<name>``; checkpoints record them flat
(``datamodule_hyper_parameters``), as given. The windows are :mod:`biomoe.data.dataset`, the
splits :mod:`biomoe.data.splits`, the order of training windows :mod:`biomoe.data.samplers`.
With ``packing`` (the default) training, validation and test rows are
:class:`~biomoe.data.packed.PackedGenomeDataset`: whole short records and pieces of long contigs,
each its own document (``batch["position_ids"]``); ``predict`` scores the validation rows and writes
one line per document (or window) with its contig and coordinates.

With several files, training windows are drawn per file (:class:`GenomeWeightedSampler`) when
``sampling_temperature`` or ``file_weights`` ask for shares other than by size, and every
held-out window carries the index of its file (``batch["genome"]``: one per window, or with
packing one per token, -1 on padding) so that held-out numbers can be reported per genome. Packed
training rows then hold the pieces of one file each, so that a row belongs to the file it is drawn for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch.utils.data import DataLoader, Sampler

from biomoe.data.config import DataConfig, takes_fields_of
from biomoe.data.dataset import GenomeWindowDataset
from biomoe.data.document_offsets import add_host_document_offsets
from biomoe.data.loader import EpochAwareDataLoader
from biomoe.data.packed import PackedGenomeDataset
from biomoe.data.samplers import EpochSeededRandomSampler, GenomeWeightedSampler, ResumableBatchSampler, file_shares
from biomoe.data.sources.reader import Region, SequenceReader
from biomoe.data.sources.registry import open_reader
from biomoe.data.sources.store_identity import STATE_KEY, data_checksums
from biomoe.data.splits import Splits, match_files, split_genome, split_regions
from biomoe.data.tokenizer import NucleotideTokenizer

__all__ = ["DataConfig", "EpochSeededRandomSampler", "GenomeDataModule", "GenomeWeightedSampler",
           "GenomeWindowDataset", "PackedGenomeDataset", "Region", "ResumableBatchSampler", "Rows", "Splits",
           "file_shares", "split_genome", "split_regions"]

Rows = GenomeWindowDataset | PackedGenomeDataset
"""What a split reads: fixed windows, or packed rows (``data.packing``)."""


class GenomeDataModule(L.LightningDataModule):
    """Train/validation/test windows over one or more genome files.

    ``setup()`` opens the genome (FASTA is validated and indexed, see :mod:`biomoe.data.sources.genome`;
    other formats go to their registered reader, see :mod:`biomoe.data.sources.registry`) and builds the
    window (or packed row) tables from :func:`split_genome`. Held-out splits are read with stride
    ``seq_length`` and no reverse complement; ``predict`` reads the validation split. ``test`` reads the test
    split; without one configured it reads the validation split and says so. ``val_fraction=0``
    and no ``val_contigs``/``val_files`` disables validation.

    Reverse-complement flips and mutations depend on (seed, epoch, index); the epoch is taken
    from ``trainer.current_epoch`` each time the train loader is iterated, so resumed runs
    continue the same augmentation sequence.

    Every setting is also an attribute (``datamodule.seq_length`` is ``datamodule.config.seq_length``);
    assigning one checks it like the constructor does.
    """

    @takes_fields_of(DataConfig)
    def __init__(
        self,
        fasta: str | list[str] = DataConfig.fasta,
        seq_length: int = DataConfig.seq_length,
        stride: int | None = DataConfig.stride,
        batch_size: int = DataConfig.batch_size,
        num_workers: int = DataConfig.num_workers,
        val_contigs: list[str] | None = DataConfig.val_contigs,
        val_fraction: float = DataConfig.val_fraction,
        max_n_fraction: float = DataConfig.max_n_fraction,
        rc_prob: float = DataConfig.rc_prob,
        seed: int = DataConfig.seed,
        fold_lowercase: bool = DataConfig.fold_lowercase,
        cache_dir: str | None = DataConfig.cache_dir,
        max_train_windows: int | None = DataConfig.max_train_windows,
        mutation_prob: float = DataConfig.mutation_prob,
        test_contigs: list[str] | None = DataConfig.test_contigs,
        test_fraction: float = DataConfig.test_fraction,
        val_files: list[str] | None = DataConfig.val_files,
        test_files: list[str] | None = DataConfig.test_files,
        file_weights: dict[str, float] | None = DataConfig.file_weights,
        sampling_temperature: float = DataConfig.sampling_temperature,
        packing: bool = DataConfig.packing,
    ) -> None:
        """The data settings; each is described, defaulted and range-checked by :class:`DataConfig`."""
        super().__init__()
        self.save_hyperparameters()  # flat, as given: what checkpoints record and scoring commands read
        self.config = DataConfig.from_mapping(self.hparams)
        self.tokenizer = NucleotideTokenizer(fold_lowercase=self.config.fold_lowercase)
        self.vocab_size: int = self.tokenizer.padded_vocab_size
        self.reader: SequenceReader | None = None
        """The reader to train on; None until :meth:`setup` opens ``fasta`` (or :meth:`from_reader` sets it)."""
        self.genome: SequenceReader | None = None
        self.splits: Splits | None = None
        self.train_dataset: Rows | None = None
        self.val_dataset: Rows | None = None
        self._test_dataset: Rows | None = None
        self.shares: np.ndarray | None = None
        self._store_checksums: tuple[str, dict[str, str]] | None = None  # (data.fasta as read, checksums)

    @classmethod
    def from_hparams(cls, saved: Mapping[str, Any], **overrides: Any) -> GenomeDataModule:
        """A datamodule with the settings a checkpoint recorded (``datamodule_hyper_parameters``);
        keys this version does not know are ignored, ``overrides`` win."""
        return cls(**dataclasses.asdict(DataConfig.from_mapping(saved, **overrides)))

    @classmethod
    def from_reader(cls, reader: SequenceReader, **settings: Any) -> GenomeDataModule:
        """A datamodule over an open reader (any :class:`~biomoe.data.sources.reader.SequenceReader`)
        instead of the files in ``fasta``; ``fasta`` defaults to the reader's paths, so that
        checkpoints record what was read."""
        settings.setdefault("fasta", [str(p) for p in reader.paths])
        datamodule = cls(**settings)
        datamodule.reader = reader
        return datamodule

    def state_dict(self) -> dict[str, Any]:
        """What checkpoints record beside the settings: the checksum of each store read
        (:mod:`~biomoe.data.sources.store_identity`), by which ``fit --ckpt_path last`` tells the
        same data from a store rebuilt at the same path. Nothing for FASTA inputs. Read once (a
        large store's manifest takes a moment to parse), at the first checkpoint."""
        sources = repr(self.config.fasta)
        if self._store_checksums is None or self._store_checksums[0] != sources:
            self._store_checksums = (sources, data_checksums(self.config.fasta))
        checksums = self._store_checksums[1]
        return {STATE_KEY: checksums} if checksums else {}

    def prepare_data(self) -> None:
        """Validate, decompress and index once per node before ranks start reading."""
        if self.reader is None:
            open_reader(self.config.fasta, cache_dir=self.config.cache_dir)

    @property
    def has_test_split(self) -> bool:
        """Whether a test split distinct from validation is configured."""
        return self.config.has_test_split

    @property
    def has_val_split(self) -> bool:
        return self.config.has_val_split

    def setup(self, stage: str | None = None) -> None:
        if self.genome is not None:
            return
        config = self.config
        genome = self.reader or open_reader(config.fasta, cache_dir=config.cache_dir)
        splits = split_genome(genome, val_contigs=config.val_contigs, val_fraction=config.val_fraction,
                              test_contigs=config.test_contigs, test_fraction=config.test_fraction,
                              val_files=config.val_files, test_files=config.test_files)
        weights = self._file_weights(genome)
        common = dict(stride=config.stride, max_n_fraction=config.max_n_fraction, regions=splits.train,
                      rc_prob=config.rc_prob, seed=config.seed, tokenizer=self.tokenizer, split="train",
                      mutation_prob=config.mutation_prob)
        if config.packing:
            self.train_dataset = PackedGenomeDataset(genome, config.seq_length, max_rows=config.max_train_windows,
                                                     per_file=weights is not None, **common)
        else:
            self.train_dataset = GenomeWindowDataset(genome, config.seq_length, max_windows=config.max_train_windows,
                                                     **common)
        self.train_dataset.epoch_source = self._current_epoch
        self.val_dataset = self._held_out(genome, splits.val, "validation")
        self._test_dataset = self._held_out(genome, splits.test, "test")
        self.shares = (None if weights is None else
                       file_shares(self.train_dataset.file_index, len(genome.paths), config.sampling_temperature,
                                   weights))
        self.splits = splits
        self.genome = genome

    def _held_out(self, genome: SequenceReader, regions: list[Region], split: str) -> Rows | None:
        if not regions:
            return None
        config = self.config
        rows = PackedGenomeDataset if config.packing else GenomeWindowDataset
        return rows(genome, config.seq_length, stride=config.seq_length, max_n_fraction=config.max_n_fraction,
                    regions=regions, rc_prob=0.0, seed=config.seed, tokenizer=self.tokenizer, split=split,
                    tag_genome=True)

    def _file_weights(self, genome: SequenceReader) -> np.ndarray | None:
        """Per-file sampling weights, or None where training rows are simply drawn by size."""
        weights = np.ones(len(genome.paths))
        for key, weight in (self.config.file_weights or {}).items():
            for index in match_files(genome, [key], "file_weights"):
                weights[index] = float(weight)
        if self.config.sampling_temperature == 1.0 and np.all(weights == 1.0):
            return None
        return weights

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
        """One label per input file, as in ``val/<label>/bits_per_base``."""
        if self.genome is None:
            raise RuntimeError("call setup() first")
        return list(self.genome.labels)

    def _set_up(self) -> Splits:
        if self.splits is None:
            raise RuntimeError("call setup() first")
        return self.splits

    @property
    def test_dataset(self) -> Rows | None:
        """The test split, or the validation split where none is configured."""
        return self._test_dataset if self._test_dataset is not None else self.val_dataset

    def _loader(self, dataset: Rows, shuffle: bool, cls: type[DataLoader] = DataLoader) -> DataLoader:
        config = self.config
        if shuffle:  # seeded, resumable order (see EpochSeededRandomSampler, ResumableBatchSampler)
            sampler: Sampler[int] = (EpochSeededRandomSampler(dataset, seed=config.seed) if self.shares is None
                                     else GenomeWeightedSampler(dataset, self.shares, seed=config.seed))
            batching: dict[str, Any] = {"batch_sampler": ResumableBatchSampler(sampler, config.batch_size, False)}
        else:
            batching = {"batch_size": config.batch_size, "shuffle": False}
        return cls(
            dataset,
            **batching,
            # Own generator: iterating a loader draws a worker base seed; from the global RNG
            # that draw would shift every later random number when a resumed run iterates anew.
            generator=torch.Generator().manual_seed(config.seed),
            num_workers=config.num_workers,
            pin_memory=torch.cuda.is_available(),
            persistent_workers=config.num_workers > 0,
        )

    def _require(self, dataset: Rows | None, what: str) -> Rows:
        if self.genome is None:
            raise RuntimeError(f"call setup() before {what}_dataloader()")
        if dataset is None:
            raise RuntimeError("validation is disabled (val_fraction=0 and no val_contigs or val_files)")
        return dataset

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Packed rows get their documents' offsets while still on the host, so that the forward on
        the GPU never waits to find them (:mod:`biomoe.data.document_offsets`)."""
        return add_host_document_offsets(batch)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self._require(self.train_dataset, "train"), shuffle=True, cls=EpochAwareDataLoader)

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
        """The validation split as validation reads it: fixed windows, or with ``packing`` packed rows,
        each of whose documents ``predict`` writes on its own line (contig, start, end)."""
        return self._loader(self._require(self.val_dataset, "predict"), shuffle=False)


def _setting(name: str) -> property:
    def get(self: GenomeDataModule) -> Any:
        return getattr(self.config, name)

    def set_(self: GenomeDataModule, value: Any) -> None:
        self.config = dataclasses.replace(self.config, **{name: value})

    return property(get, set_, doc=f"``config.{name}`` (see :class:`DataConfig`).")


for _field in dataclasses.fields(DataConfig):
    setattr(GenomeDataModule, _field.name, _setting(_field.name))
del _field
