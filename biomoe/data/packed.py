"""Rows packed with whole short records and pieces of long contigs (``data.packing: true``).

Plasmids, phages, draft assemblies and metagenomes hold many records shorter than the model's
context; fixed windows would skip them and the end of every long contig. Here every region is cut
into pieces of at most ``seq_length`` bases (:func:`~biomoe.data.packing.cut_pieces`), the pieces
are packed into rows (:func:`~biomoe.data.packing.pack_rows`) once, as a small table, and the
sequence is read lazily in ``__getitem__``, so memory stays flat for any corpus.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import torch

from biomoe.data.dataset import SeededRows, ambiguous_counts
from biomoe.data.packing import PackedTable, cut_pieces, pack_rows
from biomoe.data.sources.reader import Region, SequenceReader, reader_label
from biomoe.data.tokenizer import BOS_ID, PAD_ID, NucleotideTokenizer
from biomoe.errors import GenomeInputError

__all__ = ["PackedGenomeDataset"]


class PackedGenomeDataset(SeededRows):
    """Rows of ``seq_length`` tokens, each holding one or more documents: whole records shorter than
    a row and pieces (at most ``seq_length`` bases) of longer ones, the last piece of a contig kept.

    Each document is laid out as a window of :class:`~biomoe.data.dataset.GenomeWindowDataset`:
    ``input_ids = [BOS] + bases[:-1]``, ``labels = bases``, ``loss_mask`` True where the label is
    A/C/G/T. Items also carry ``position_ids`` (each token's position in its document, 0 where a
    document starts, so the model keeps attention and RoPE inside it) and, with ``tag_genome``,
    ``genome``: per token, the index of its document's file in ``genome.paths``, -1 on padding.
    Padding fills a row's end only where no piece left fits; it is one more document of PAD ids,
    never scored.

    Pieces start every ``stride`` bases (default ``seq_length``: every base is a label exactly once
    per epoch). A piece with no A/C/G/T or more than ``max_n_fraction`` N/ambiguous bases is
    dropped; all such pieces of a split are reported in one warning line. ``per_file`` packs each
    file's pieces into rows of their own, for samplers that draw a file first.

    Augmentation is per document and a pure function of (seed, epoch, row): each document is
    reverse-complemented with probability ``rc_prob`` (the layout stays), and input bases are
    mutated with probability ``mutation_prob``, as for windows.
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
        max_rows: int | None = None,
        split: str = "train",
        mutation_prob: float = 0.0,
        tag_genome: bool = False,
        per_file: bool = False,
    ) -> None:
        super().__init__(seed=seed, rc_prob=rc_prob, mutation_prob=mutation_prob, split=split, tokenizer=tokenizer)
        regions = self._read_from(genome, seq_length, stride, max_n_fraction, regions, tag_genome)
        self._file_of_contig = np.array([c.file_index for c in genome.contigs], dtype=np.int64)
        self.piece_contig, self.piece_start, self.piece_end = self._usable_pieces(regions)
        lengths = self.piece_end - self.piece_start
        groups = self._file_of_contig[self.piece_contig] if per_file else None
        self.table: PackedTable = pack_rows(lengths, self.seq_length, groups)
        if max_rows is not None and len(self.table) > max_rows:
            keep = np.sort(np.random.default_rng(self.seed).choice(len(self.table), max_rows, replace=False))
            self.table = self.table.select(keep)

    # -- piece table ------------------------------------------------------------------
    def _usable_pieces(self, regions: Sequence[Region]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        contigs, starts, ends = cut_pieces(regions, self.seq_length, self.stride)
        keep = np.ones(starts.size, dtype=bool)
        boundaries = np.flatnonzero(np.diff(contigs)) + 1 if contigs.size else np.zeros(0, dtype=np.int64)
        for lo, hi in zip(np.concatenate(([0], boundaries)), np.concatenate((boundaries, [contigs.size]))):
            if hi <= lo:
                continue
            lengths = ends[lo:hi] - starts[lo:hi]
            bad = ambiguous_counts(self.genome, self.tokenizer, int(contigs[lo]), starts[lo:hi], ends[lo:hi])
            keep[lo:hi] = (bad < lengths) & (bad <= self.max_n_fraction * lengths)
        dropped = int((~keep).sum())
        if keep.any() and dropped:
            warnings.warn(
                f"{self.split}: dropped {dropped:,} record piece(s) with no A/C/G/T or more than "
                f"{self.max_n_fraction:.0%} N/ambiguous bases ({int((ends - starts)[~keep].sum()):,} bp)",
                stacklevel=3,  # the datamodule (or whoever built the dataset)
            )
        if not keep.any():
            why = (f"all {starts.size:,} pieces have no A/C/G/T or more than {self.max_n_fraction:.0%} "
                   "N/ambiguous bases (is the genome all N?)" if starts.size
                   else f"the {self.split} region(s) hold no bases")
            raise GenomeInputError(reader_label(self.genome), f"no {self.split} rows: {why}")
        return contigs[keep], starts[keep], ends[keep]

    # -- Dataset protocol -------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.table)

    def documents(self, index: int) -> list[tuple[str, int, int]]:
        """(contig name, start, end) of each document of row ``index``, in row order, forward strand."""
        return [(self.genome.contigs[int(self.piece_contig[p])].name, int(self.piece_start[p]),
                 int(self.piece_end[p])) for p in self.table.row(index)]

    def document_ids(self, index: int) -> list[int]:
        """The pieces of row ``index``, in row order, as numbers unique across the dataset (pieces
        are numbered in genome order: contig by contig, start by start)."""
        return self.table.row(index).tolist()

    def reverse_complemented(self, index: int) -> np.ndarray:
        """Per document of row ``index``, whether it is reverse-complemented in the current epoch."""
        return self.flip_draws(index, self.table.row(index).size)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if index < 0:
            index += len(self)
        pieces = self.table.row(index)
        flips = self.reverse_complemented(index)
        size = self.seq_length
        labels = np.full(size, PAD_ID, dtype=np.int64)
        inputs = np.full(size, PAD_ID, dtype=np.int64)
        positions = np.zeros(size, dtype=np.int64)
        files = np.full(size, -1, dtype=np.int64)
        at = 0
        for piece, flip in zip(pieces.tolist(), flips.tolist()):
            contig, start, end = int(self.piece_contig[piece]), int(self.piece_start[piece]), int(self.piece_end[piece])
            ids = self.tokenizer.encode(self.genome.fetch(contig, start, end))
            if flip:
                ids = self.tokenizer.reverse_complement(ids)
            n = ids.size
            labels[at:at + n] = ids
            inputs[at] = BOS_ID
            inputs[at + 1:at + n] = ids[:-1]
            positions[at:at + n] = np.arange(n)
            files[at:at + n] = self._file_of_contig[contig]
            at += n
        positions[at:] = np.arange(size - at)  # padding is one more document
        labels_t = torch.from_numpy(labels)
        item = {"input_ids": torch.from_numpy(self.mutate(inputs, index)), "labels": labels_t,
                "loss_mask": self.tokenizer.unambiguous_mask(labels_t), "position_ids": torch.from_numpy(positions)}
        if self.tag_genome:
            item["genome"] = torch.from_numpy(files)
        return item

    @property
    def file_index(self) -> np.ndarray:
        """Per row, the index of the file of its first document (the file of every document when
        packed ``per_file``)."""
        firsts = self.table.pieces[self.table.offsets[:-1]]
        return self._file_of_contig[self.piece_contig[firsts]]

    @property
    def piece_files(self) -> np.ndarray:
        """Per piece, the index of its file in ``genome.paths``."""
        return self._file_of_contig[self.piece_contig]

    @property
    def real_fraction(self) -> float:
        """Share of the row tokens that are bases (the rest is padding)."""
        return float((self.piece_end - self.piece_start)[self.table.pieces].sum()) / max(len(self) * self.seq_length, 1)
