"""Hidden states of a model for FASTA input, per base or pooled (the rows ``biomoe embed`` writes).

Each contig is read in consecutive windows of ``window`` bases (the training length by default);
the model reads ``<bos>`` + the window, as in training, and the embedding of base i is the hidden
state at the position where base i is the input token (so it has read bases up to and including
i in that window; like in training, every window starts with a fresh context). ``layer`` picks
the hidden state: ``final`` (default) is the final RMSNorm's output, the vector the LM head reads;
an integer K is the residual stream after block K (0-based; negative counts from the end).

Pooling:

* ``position``: one row per base (every base, N included);
* ``mean``: one row per contig, the mean over its A/C/G/T bases;
* ``window``: one row per ``pool_size``-base bin of each contig (the last one may be shorter),
  the mean over its A/C/G/T bases. A row with no such base is NaN.

Windows are computed a batch at a time and their rows written straight into the caller's array
(a memory-mapped file, for long genomes), so memory stays bounded.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from biomoe.data.reader import SequenceReader
from biomoe.data.tokenizer import BOS_ID, NucleotideTokenizer
from biomoe.model.transformer import MoETransformer

__all__ = ["POOLS", "EmbeddingLayout", "embed_genome", "hidden_states", "parse_layer"]

POOLS = ("position", "mean", "window")


class _StopForward(Exception):
    """Raised by the capture hook: the blocks after the chosen one need not run."""


def parse_layer(text: str | int, num_layers: int) -> int | None:
    """``final`` -> None (the final norm's output); an integer -> a block index in range."""
    if isinstance(text, str) and text.strip().lower() == "final":
        return None
    try:
        layer = int(text)
    except ValueError:
        raise ValueError(f"layer must be 'final' or a block index, got {text!r}") from None
    if not -num_layers <= layer < num_layers:
        raise ValueError(f"layer {layer} is outside the model's blocks 0..{num_layers - 1}")
    return layer % num_layers


@torch.no_grad()
def hidden_states(model: MoETransformer, input_ids: Tensor, layer: int | None = None) -> Tensor:
    """Hidden states [b, s, hidden] of ``input_ids``: the final norm's output (``layer=None``) or
    the residual stream after block ``layer``."""
    if layer is None:
        return model(input_ids, return_logits=False).hidden
    captured: list[Tensor] = []

    def capture(module, inputs, output):
        captured.append(output[0])
        raise _StopForward

    handle = model.blocks[layer].register_forward_hook(capture)
    try:
        model(input_ids, return_logits=False)
    except _StopForward:
        pass
    finally:
        handle.remove()
    return captured[0]


@dataclass(frozen=True)
class EmbeddingLayout:
    """Which rows the output has: per contig, the row of its first base/bin and the bin size."""

    names: list[str]
    lengths: list[int]
    pool: str
    pool_size: int = 1

    def bin_size(self, contig: int) -> int:
        if self.pool == "position":
            return 1
        return max(self.lengths[contig], 1) if self.pool == "mean" else self.pool_size

    def rows_of(self, contig: int) -> int:
        if self.lengths[contig] == 0:
            return 1 if self.pool == "mean" else 0
        return -(-self.lengths[contig] // self.bin_size(contig))

    def first_rows(self) -> np.ndarray:
        counts = [self.rows_of(i) for i in range(len(self.names))]
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def index_arrays(self) -> dict[str, np.ndarray]:
        contig, position, length = [], [], []
        for i, total in enumerate(self.lengths):
            size = self.bin_size(i)
            starts = np.arange(0, max(total, 1) if self.pool == "mean" else total, size, dtype=np.int64)
            contig.append(np.full(starts.size, i, dtype=np.int32))
            position.append(starts)
            length.append(np.minimum(size, total - starts))
        return {"contig": np.concatenate(contig), "position": np.concatenate(position),
                "length": np.concatenate(length), "contig_names": np.array(self.names, dtype=str)}


def _windows(genome: SequenceReader, window: int) -> Iterator[tuple[int, int, int]]:
    for index, info in enumerate(genome.contigs):
        for start in range(0, info.length, window):
            yield index, start, min(start + window, info.length)


def _batches(genome: SequenceReader, window: int, batch_size: int) -> Iterator[list[tuple[int, int, int]]]:
    """Consecutive windows of equal length, ``batch_size`` at most (so they stack into one batch)."""
    batch: list[tuple[int, int, int]] = []
    for item in _windows(genome, window):
        if batch and (len(batch) == batch_size or item[2] - item[1] != batch[0][2] - batch[0][1]):
            yield batch
            batch = []
        batch.append(item)
    if batch:
        yield batch


class _RowWriter:
    """Turns per-base hidden states, window after window, into output rows (pooled or not).

    Windows arrive in genome order, so a bin is complete once a window ends at or past its end;
    only the one bin still open carries over between windows.
    """

    def __init__(self, layout: EmbeddingLayout, out: np.ndarray, first_rows: np.ndarray) -> None:
        self.layout, self.out, self.first_rows = layout, out, first_rows
        self.bases = np.zeros(out.shape[0], dtype=np.int64)
        self._open: tuple[int, int, np.ndarray, int] | None = None  # (contig, bin, sum, count)

    def add(self, contig: int, start: int, states: np.ndarray, ids: np.ndarray) -> None:
        row0 = int(self.first_rows[contig])
        acgt = NucleotideTokenizer.unambiguous_mask(ids)
        if self.layout.pool == "position":
            self.out[row0 + start:row0 + start + len(states)] = states
            self.bases[row0 + start:row0 + start + len(states)] = acgt
            return
        size, end = self.layout.bin_size(contig), start + len(states)
        bins = np.arange(start, end) // size
        local = bins - bins[0]
        first_of_bin = np.flatnonzero(np.r_[True, local[1:] != local[:-1]])  # bins are contiguous runs
        sums = np.add.reduceat(np.where(acgt[:, None], states, 0).astype(np.float64), first_of_bin, axis=0)
        counts = np.add.reduceat(acgt.astype(np.int64), first_of_bin)
        if self._open is not None and self._open[:2] == (contig, int(bins[0])):
            sums[0] += self._open[2]
            counts[0] += self._open[3]
        self._open = None
        last_bin = int(bins[-1])
        complete = sums.shape[0] if end >= min((last_bin + 1) * size, self.layout.lengths[contig]) \
            else sums.shape[0] - 1
        for j in range(complete):
            row = row0 + int(bins[0]) + j
            self.out[row] = sums[j] / counts[j] if counts[j] else np.nan
            self.bases[row] = counts[j]
        if complete < sums.shape[0]:
            self._open = (contig, last_bin, sums[-1], int(counts[-1]))

    def finish_empty_contigs(self) -> None:
        """A zero-length contig has a (NaN) mean row but no window to fill it."""
        if self.layout.pool == "mean":
            for i, length in enumerate(self.layout.lengths):
                if length == 0:
                    self.out[self.first_rows[i]] = np.nan


@torch.no_grad()
def embed_genome(model: MoETransformer, genome: SequenceReader, out: np.ndarray, layout: EmbeddingLayout,
                 layer: int | None = None, window: int = 1024, batch_size: int = 8, progress=None) -> np.ndarray:
    """Fill ``out`` [rows of ``layout``, hidden] with embeddings; returns the A/C/G/T count per row."""
    tokenizer = NucleotideTokenizer()
    device = next(model.parameters()).device
    writer = _RowWriter(layout, out, layout.first_rows())
    for batch in _batches(genome, window, batch_size):
        ids = np.stack([tokenizer.encode(genome.fetch(genome.contigs[c].name, s, e)) for c, s, e in batch])
        tokens = torch.from_numpy(ids).to(device)
        tokens = torch.cat([torch.full_like(tokens[:, :1], BOS_ID), tokens], dim=1)
        states = hidden_states(model, tokens, layer)[:, 1:].float().cpu().numpy()
        for (contig, start, _), row_states, row_ids in zip(batch, states, ids):
            writer.add(contig, start, row_states, row_ids)
        if progress is not None:
            progress.update(int(ids.size))
    writer.finish_empty_contigs()
    return writer.bases
