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

Windows of all contigs share batched forward passes, and short ones (short contigs, the last
piece of a long one) share rows, each read as a document of its own with the very embeddings it
gets alone; pooling is done on the device, and rows are written straight into the caller's array
(a memory-mapped file, for long genomes), so memory stays bounded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from biomoe.data.sources.reader import SequenceReader
from biomoe.data.tokenizer import BOS_ID, NucleotideTokenizer
from biomoe.inference.batching import Window, WindowBatch, batches_for, genome_windows, run_batches
from biomoe.inference.load import InferenceModel
from biomoe.model.documents import DocumentLayout
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
def hidden_states(model: MoETransformer, input_ids: Tensor, layer: int | None = None,
                  documents: DocumentLayout | None = None) -> Tensor:
    """Hidden states [b, s, hidden] of ``input_ids`` (rows packed with ``documents``, if given):
    the final norm's output (``layer=None``) or the residual stream after block ``layer``."""
    if layer is None:
        return model(input_ids, return_logits=False, documents=documents).hidden
    captured: list[Tensor] = []

    def capture(module, inputs, output):
        captured.append(output[0])
        raise _StopForward

    handle = model.blocks[layer].register_forward_hook(capture)
    try:
        model(input_ids, return_logits=False, documents=documents)
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


class _RowWriter:
    """Turns per-base hidden states, window after window, into output rows (pooled or not).

    Windows arrive in genome order, so a bin is complete once a window ends at or past its end;
    only the one bin still open carries over between windows.
    """

    def __init__(self, layout: EmbeddingLayout, out: np.ndarray, first_rows: np.ndarray) -> None:
        self.layout, self.out, self.first_rows = layout, out, first_rows
        self.bases = np.zeros(out.shape[0], dtype=np.int64)
        self._open: tuple[int, int, np.ndarray, int] | None = None  # (contig, bin, sum, count)

    def add_positions(self, contig: int, start: int, states: np.ndarray, ids: np.ndarray) -> None:
        """``pool == "position"``: the window's rows as they are."""
        row0 = int(self.first_rows[contig])
        self.out[row0 + start:row0 + start + len(states)] = states
        self.bases[row0 + start:row0 + start + len(states)] = NucleotideTokenizer.unambiguous_mask(ids)

    def add_sums(self, contig: int, start: int, end: int, sums: np.ndarray, counts: np.ndarray) -> None:
        """Pooled modes: ``sums``/``counts`` of the A/C/G/T bases of the window's bins, the first
        being the bin that holds base ``start``; a bin the window does not finish stays open."""
        row0 = int(self.first_rows[contig])
        size = self.layout.bin_size(contig)
        first_bin, last_bin = start // size, (end - 1) // size
        sums = sums[:last_bin - first_bin + 1].astype(np.float64)
        counts = counts[:last_bin - first_bin + 1].astype(np.int64)
        if self._open is not None and self._open[:2] == (contig, first_bin):
            sums[0] += self._open[2]
            counts[0] += self._open[3]
        self._open = None
        complete = sums.shape[0] if end >= min((last_bin + 1) * size, self.layout.lengths[contig]) \
            else sums.shape[0] - 1
        for j in range(complete):
            row = row0 + first_bin + j
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


def _pinned_to(array: np.ndarray, device: torch.device) -> Tensor:
    """A small host array on ``device`` without waiting for the device (a pageable copy would)."""
    tensor = torch.from_numpy(array)
    if device.type != "cuda":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)


def _bin_sums(tokens: Tensor, states: Tensor, batch: WindowBatch, layout: EmbeddingLayout,
              device: torch.device) -> dict[str, Tensor]:
    """Per window, the sums and counts of the A/C/G/T bases' states in each of its bins (the first
    being the bin of its first base): ``sums`` [windows, bins, hidden] fp32, ``counts`` [windows, bins].

    Every token of the packed rows is added into one slot (window, bin); lead tokens and padding
    go to a spare slot that is dropped (they are not A/C/G/T, so they weigh nothing anyway)."""
    rows, width = tokens.shape
    starts = np.array([w.key[1] for w in batch.windows], dtype=np.int64)
    sizes = np.array([layout.bin_size(w.key[0]) for w in batch.windows], dtype=np.int64)
    steps = np.arange(int(batch.lengths.max()))[None, :]
    local = (starts[:, None] + steps) // sizes[:, None] - (starts // sizes)[:, None]  # bin, from the window's first
    local = np.where(steps < batch.lengths[:, None], local, 0)
    bins = int(local.max()) + 1
    spare = len(batch.windows) * bins
    slot = np.full(rows * width, spare, dtype=np.int64)
    for i, (row, offset, size) in enumerate(zip(batch.rows, batch.offsets, batch.lengths)):
        first = row * width + offset
        slot[first:first + size] = i * bins + local[i, :size]
    flat = _pinned_to(slot, device)
    weight = NucleotideTokenizer.unambiguous_mask(tokens).reshape(-1)
    values = torch.where(weight[:, None], states.reshape(rows * width, -1).float(), 0.0)
    sums = torch.zeros(spare + 1, states.shape[-1], dtype=torch.float32, device=device).index_add_(0, flat, values)
    counts = torch.zeros(spare + 1, dtype=torch.int64, device=device).index_add_(0, flat, weight.long())
    return {"sums": sums[:spare].view(len(batch.windows), bins, -1),
            "counts": counts[:spare].view(len(batch.windows), bins)}


def embed_genome(model: InferenceModel | MoETransformer, genome: SequenceReader, out: np.ndarray,
                 layout: EmbeddingLayout, layer: int | None = None, window: int = 1024,
                 batch_size: int | None = None, progress=None, batch_tokens: int | None = None) -> np.ndarray:
    """Fill ``out`` [rows of ``layout``, hidden] with embeddings; returns the A/C/G/T count per row.

    Windows of all contigs share forward passes of up to ``batch_tokens`` tokens, short ones packed
    into rows of ``window`` + 1 tokens (``batch_size`` caps the windows per pass). Pooling happens
    on the device: only per-bin sums and counts (or, for ``position``, the rows themselves, already
    in ``out``'s dtype) come back to the host."""
    model = InferenceModel.wrap(model)
    device = model.device
    writer = _RowWriter(layout, out, layout.first_rows())
    contig_index = {name: i for i, name in enumerate(layout.names)}
    out_dtype = torch.from_numpy(np.zeros(0, dtype=out.dtype)).dtype
    windows = (Window((contig_index[w.key[0]], w.key[1]), w.ids) for w in genome_windows(genome, window))
    # The network reads <bos> + the window: the lead token of every window's slot in a row.
    batches = batches_for(windows, device, batch_tokens, batch_size, row_tokens=window + 1, lead=BOS_ID)

    def compute(tokens: Tensor, batch: WindowBatch) -> dict[str, Tensor]:
        with model.running():
            states = hidden_states(model.module, tokens, layer, batch.documents(device))
        if layout.pool == "position":  # packed as they are: the host takes each window's slice
            return {"states": states.to(out_dtype)}
        return _bin_sums(tokens, states, batch, layout, device)

    def place(batch: WindowBatch, result: dict[str, np.ndarray]) -> None:
        for i, window_ in enumerate(batch.windows):
            contig, start = window_.key
            size = window_.ids.size
            if layout.pool == "position":
                row, offset = batch.rows[i], batch.offsets[i]
                writer.add_positions(contig, start, result["states"][row, offset:offset + size], window_.ids)
            else:
                writer.add_sums(contig, start, start + size, result["sums"][i], result["counts"][i])
        if progress is not None:
            progress.update(batch.real_tokens)

    run_batches(batches, device, compute, place)
    writer.finish_empty_contigs()
    return writer.bases
