"""Fixed-length windows of a genome as next-base-prediction examples.

A training example is a fixed-length window of the genome. Windows are described by a small
table (contig index, start) built once; sequence is read lazily through the reader in
``__getitem__``, so memory stays flat for any genome size and DataLoader workers each open their
own file handles. :mod:`biomoe.data.packed` packs whole short records and the ends of long
contigs into rows instead (``data.packing``); both share the epoch and augmentation seeding of
:class:`SeededRows`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from biomoe.data.config import check_settings
from biomoe.data.sources.reader import Region, SequenceReader, reader_label
from biomoe.data.tokenizer import A_ID, BOS_ID, T_ID, NucleotideTokenizer
from biomoe.errors import GenomeInputError

__all__ = ["GenomeWindowDataset", "SeededRows", "ambiguous_counts"]

_SCAN_BLOCK = 8_000_000  # bases read at once when counting ambiguous bases


def ambiguous_counts(genome: SequenceReader, tokenizer: NucleotideTokenizer, contig: int, starts: np.ndarray,
                     ends: np.ndarray) -> np.ndarray:
    """Per stretch ``[starts[i], ends[i])`` of one contig, how many bases are not A/C/G/T.

    ``starts`` and ``ends`` must be non-decreasing (windows or pieces in contig order). The contig
    is read in blocks of about ``_SCAN_BLOCK`` bases, so a chromosome never sits in memory whole.
    """
    counts = np.zeros(starts.size, dtype=np.int64)
    begin = 0
    while begin < starts.size:
        first = int(starts[begin])
        end = int(np.searchsorted(starts, first + _SCAN_BLOCK, side="left"))
        end = max(end, begin + 1)
        span_end = int(ends[end - 1])
        ids = tokenizer.encode(genome.fetch(contig, first, span_end))
        bad = np.concatenate(([0], np.cumsum(~tokenizer.unambiguous_mask(ids), dtype=np.int64)))
        counts[begin:end] = bad[ends[begin:end] - first] - bad[starts[begin:end] - first]
        begin = end
    return counts


class SeededRows(Dataset):
    """The epoch and augmentation seeding that window and packed datasets share.

    Augmentation of item ``index`` is a pure function of (seed, epoch, index), so the same seed
    and epoch give the same flips and mutations whatever the worker count or sampling order, and a
    resumed run continues the same sequence. The epoch lives in a shared-memory tensor, so
    :meth:`set_epoch` in the main process also reaches persistent DataLoader workers.
    """

    def __init__(self, *, seed: int, rc_prob: float, mutation_prob: float, split: str,
                 tokenizer: NucleotideTokenizer | None) -> None:
        check_settings(rc_prob=rc_prob, mutation_prob=mutation_prob)
        self.rc_prob = float(rc_prob)
        self.mutation_prob = float(mutation_prob)
        self.seed = int(seed)
        self.split = split
        self.tokenizer = tokenizer or NucleotideTokenizer()
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_()
        self._epochs_started = 0
        self.epoch_source: Callable[[], int | None] | None = None

    def _read_from(self, genome: SequenceReader, seq_length: int, stride: int | None, max_n_fraction: float,
                   regions: Sequence[Region] | None, tag_genome: bool) -> Sequence[Region]:
        """The reading settings windows and packed rows share, checked and kept; returns the regions
        to read (default: every contig whole)."""
        check_settings(seq_length=seq_length)
        stride = seq_length if stride is None else stride
        check_settings(stride=stride, max_n_fraction=max_n_fraction)
        self.genome = genome
        self.seq_length = int(seq_length)
        self.stride = int(stride)
        self.max_n_fraction = float(max_n_fraction)
        self.tag_genome = bool(tag_genome)
        return regions if regions is not None else [(i, 0, c.length) for i, c in enumerate(genome.contigs)]

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

    def flip_draws(self, index: int, count: int) -> np.ndarray:
        """``count`` reverse-complement decisions for item ``index`` in the current epoch."""
        if self.rc_prob <= 0.0:
            return np.zeros(count, dtype=bool)
        rng = np.random.default_rng((self.seed, self.epoch, int(index)))
        return rng.random(count) < self.rc_prob

    def mutate(self, ids: np.ndarray, index: int) -> np.ndarray:
        """A copy of ``ids`` with each A/C/G/T swapped for another base with probability
        ``mutation_prob``; N, IUPAC codes and specials (BOS, padding) are left alone.
        Deterministic in (seed, epoch, index), like the reverse-complement flips."""
        if self.mutation_prob <= 0.0:
            return ids
        rng = np.random.default_rng((self.seed, self.epoch, int(index), 1))
        hit = (rng.random(ids.shape) < self.mutation_prob) & (ids >= A_ID) & (ids <= T_ID)
        shift = rng.integers(1, 4, size=ids.shape)  # 1..3: always a different base
        out = ids.copy()
        out[hit] = A_ID + (ids[hit] - A_ID + shift[hit]) % 4
        return out

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["epoch_source"] = None  # usually a bound method of the DataModule/trainer
        return state


class GenomeWindowDataset(SeededRows):
    """Fixed-length windows of a :class:`~biomoe.data.sources.reader.SequenceReader` as next-token-prediction examples
    (``data.packing: false``; :class:`~biomoe.data.packed.PackedGenomeDataset` is the packed form).

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
    are skipped, reported in one warning line (their count and bases); an empty table raises
    :class:`GenomeInputError`.

    With ``rc_prob > 0`` a window is reverse-complemented with that probability, decided
    by ``np.random.default_rng((seed, epoch, index))``: the same seed and epoch always
    give the same flips regardless of worker count or sampling order.

    With ``mutation_prob > 0`` each A/C/G/T of ``input_ids`` (never of ``labels``) is
    replaced by one of the three other bases with that probability, from its own
    (seed, epoch, index) stream. The model must then predict the true base from a
    slightly wrong context: a denoising regulariser for small genomes, read many times
    over, where a model otherwise memorises exact contexts. Diverged copies of repeats
    and paralogous genes are the same situation in real sequence.
    """

    def __init__(
        self,
        genome: SequenceReader,
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
        super().__init__(seed=seed, rc_prob=rc_prob, mutation_prob=mutation_prob, split=split, tokenizer=tokenizer)
        regions = self._read_from(genome, seq_length, stride, max_n_fraction, regions, tag_genome)
        self.contig_index, self.starts = self._build_table(regions)
        if max_windows is not None and len(self.starts) > max_windows:
            keep = np.sort(np.random.default_rng(self.seed).choice(len(self.starts), max_windows, replace=False))
            self.contig_index, self.starts = self.contig_index[keep], self.starts[keep]
        self._file_of_contig = np.array([c.file_index for c in genome.contigs], dtype=np.int64)

    # -- window table -----------------------------------------------------------------
    def _build_table(self, regions: Sequence[Region]) -> tuple[np.ndarray, np.ndarray]:
        seq_len = self.seq_length
        contig_parts: list[np.ndarray] = []
        start_parts: list[np.ndarray] = []
        short: dict[int, int] = {}  # contig -> length, each contig once however many regions it has
        candidates = 0
        for contig, lo, hi in regions:
            info = self.genome.contigs[contig]
            if info.length < seq_len:
                short[contig] = info.length
                continue
            starts = np.arange(lo, hi - seq_len + 1, self.stride, dtype=np.int64)
            if starts.size == 0:
                continue
            candidates += starts.size
            keep = ambiguous_counts(self.genome, self.tokenizer, contig, starts, starts + seq_len) \
                <= self.max_n_fraction * seq_len
            start_parts.append(starts[keep])
            contig_parts.append(np.full(int(keep.sum()), contig, dtype=np.int64))
        if short:
            warnings.warn(
                f"{self.split}: skipping {len(short):,} contig(s) shorter than seq_length {seq_len:,} "
                f"({sum(short.values()):,} bp); data.packing: true trains on them",
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
            elif short and len(short) == len({contig for contig, _, _ in regions}):
                why = f"every contig is shorter than seq_length {seq_len:,}"
            else:
                why = f"no room for a window of {seq_len:,} bases in the {self.split} region(s)"
            raise GenomeInputError(reader_label(self.genome), f"no {self.split} windows: {why}")
        return contig_index, starts_all

    def is_reverse_complemented(self, index: int) -> bool:
        """Whether item ``index`` is reverse-complemented in the current epoch."""
        return bool(self.flip_draws(index, 1)[0])

    # -- Dataset protocol -------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.starts.size)

    def window(self, index: int) -> tuple[str, int, int]:
        """(contig name, start, end) of window ``index`` on the forward strand."""
        start = int(self.starts[index])
        return self.genome.contigs[int(self.contig_index[index])].name, start, start + self.seq_length

    def documents(self, index: int) -> list[tuple[str, int, int]]:
        """Window ``index`` as the one document of its row (packed rows list several), so that what
        reads rows document by document needs no case for fixed windows."""
        return [self.window(index)]

    def document_ids(self, index: int) -> list[int]:
        """The number of the row's one document: the window's index."""
        return [index]

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
