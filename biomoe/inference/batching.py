"""Windows of sequence in, per-window results out, with the device never waiting for the host.

Every throughput command (score-fasta, score-variants, embed) is the same loop: cut the input into
windows, run the network on many windows at once, hand each window's result to a writer. Done
naively (one window, then a copy back, then the next) the GPU idles while Python reads FASTA,
tokenises and writes. Here the three stages overlap:

1. a background thread reads and tokenises windows and packs them into pinned host batches of up
   to ``batch_tokens`` tokens (:func:`pack_windows`, :func:`prefetch`), with where each window
   sits and the rows' document offsets worked out on the host;
2. the main thread copies a batch to the device without blocking and queues its forward pass and
   the copy of its (small) results back into pinned memory;
3. a batch's results are handed to the writer only once the device has finished it, while the next
   batches are already queued, so the host synchronises once per batch, a batch behind.

Short windows (short records, the last piece of a long one) share rows: several are packed end to
end in one row, each read as a document of its own (``position_ids``, see
:mod:`biomoe.model.documents`), so a genome of many short contigs costs its bases, not a padded
row per contig. A row is padded on the right only up to the batch's widest row: the network routes
every token on its own (no capacity limit), so neither packing nor padding changes any window's
result beyond fp32 rounding. Engines read each window's values back with
:meth:`WindowBatch.per_window` (or its row and offset).
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np
import torch
from torch import Tensor

from biomoe.data.sources.reader import SequenceReader
from biomoe.data.tokenizer import N_ID, NucleotideTokenizer
from biomoe.errors import GenomeInputError
from biomoe.inference.cpu_threads import CpuThreadChoice
from biomoe.model.documents import DocumentLayout, host_document_offsets
from biomoe.resources import host_memory_bytes

__all__ = ["DEFAULT_BATCH_TOKENS", "Window", "WindowBatch", "batches_for", "check_window_memory",
           "default_batch_tokens", "genome_windows", "pack_windows", "prefetch", "run_batches"]

DEFAULT_BATCH_TOKENS = {"cuda": 1 << 18, "cpu": 1 << 13}
"""Tokens per forward pass by device type: on a GPU as many as a hidden-512 network's activations
allow in a few GB, so that each pass keeps the GPU busy (docs/benchmarks.md, "How variant scoring
is built", says how the figure was chosen and how to time others); on a CPU, small enough that
progress moves."""

T = TypeVar("T")


def default_batch_tokens(device: torch.device | str) -> int:
    return DEFAULT_BATCH_TOKENS.get(torch.device(device).type, DEFAULT_BATCH_TOKENS["cpu"])


def batches_for(windows: Iterable[Window[T]], device: torch.device, batch_tokens: int | None = None,
                max_windows: int | None = None, row_tokens: int | None = None,
                lead: int | None = None) -> Iterator[WindowBatch[T]]:
    """:func:`pack_windows` read ahead in a background thread (pinned for a CUDA device)."""
    return prefetch(pack_windows(windows, batch_tokens or default_batch_tokens(device), max_windows,
                                 pin=device.type == "cuda", row_tokens=row_tokens, lead=lead))


@dataclass(frozen=True)
class Window(Generic[T]):
    """One stretch of tokens and whatever the writer needs to place its result (``key``)."""

    key: T
    ids: np.ndarray  # int64 token ids


@dataclass
class WindowBatch(Generic[T]):
    """Windows packed into one ``[rows, width]`` int64 tensor (pinned on a CUDA run), padded with N.

    Window ``i`` (in input order) is ``tokens[rows[i], offsets[i]:offsets[i] + lengths[i]]``, preceded
    by the ``lead`` token when the batch was packed with one. ``position_ids`` is None when every
    row holds one window from its start (plain causal rows); otherwise each window, and the padding
    at a row's end, is a document of its own, and ``cu_seqlens``/``max_seqlen`` are its offsets for
    the CUDA kernels, worked out on the host."""

    windows: list[Window[T]]
    tokens: Tensor
    lengths: np.ndarray
    rows: np.ndarray
    offsets: np.ndarray
    position_ids: Tensor | None = None
    cu_seqlens: Tensor | None = None
    max_seqlen: int | None = None
    gather: Tensor | None = None
    """[windows, longest] int64 indices into the flattened rows (None: window i is row i from its start)."""

    @property
    def real_tokens(self) -> int:
        return int(self.lengths.sum())

    def documents(self, device: torch.device) -> DocumentLayout | None:
        """The rows' documents on ``device`` for the model's forward (None: plain rows)."""
        if self.position_ids is None:
            return None
        cuda = device.type == "cuda"
        positions = self.position_ids.to(device, non_blocking=cuda)
        if not cuda:  # the CPU path masks; the offsets are for the CUDA kernels
            return DocumentLayout.of(positions)
        return DocumentLayout.of(positions, self.cu_seqlens.to(device, non_blocking=True), self.max_seqlen)

    def per_window(self, values: Tensor, fill: float) -> Tensor:
        """``values`` [rows, width, ...] (on any device) → ``[windows, longest, ...]``: window i's
        values from its first token, in input order. Past a window's end: ``fill`` in packed rows,
        the row's padding (as scored) in plain ones."""
        longest = int(self.lengths.max(initial=1))
        if self.gather is None:  # window i is row i, after the lead token if there is one
            start = int(self.offsets[0]) if self.offsets.size else 0
            return values[:, start:start + longest]
        index = self.gather.to(values.device, non_blocking=values.is_cuda)
        flat = values.flatten(0, 1)
        return torch.cat([flat, flat.new_full((1, *flat.shape[1:]), fill)])[index]


def pack_windows(windows: Iterable[Window[T]], batch_tokens: int, max_windows: int | None = None,
                 pin: bool = False, row_tokens: int | None = None, lead: int | None = None) -> Iterator[WindowBatch[T]]:
    """Pack consecutive windows into batches whose ``rows x width`` stays within ``batch_tokens``
    (a window longer than the budget is a batch of its own); ``max_windows`` caps the windows of a
    batch. Order is kept: a batch's windows follow those of the one before, in input order.

    Inside a batch a window goes to the first row with room for it (first fit), so short windows
    fill rows of up to ``row_tokens`` tokens (None: the batch's longest window), and a long one
    takes a row of its own. ``lead`` (a token id) is put before every window, for an engine whose
    network reads ``<bos>`` + the window."""
    extra = 0 if lead is None else 1
    pending: list[Window[T]] = []
    placed: list[tuple[int, int]] = []  # (row, offset of the slot, lead included) per window
    fills: list[int] = []
    capacity = width = 0

    def emit() -> WindowBatch[T]:
        lengths = np.array([w.ids.size for w in pending], dtype=np.int64)
        rows = np.array([r for r, _ in placed], dtype=np.int64)
        offsets = np.array([o for _, o in placed], dtype=np.int64) + extra
        tokens = torch.full((len(fills), max(width, 1)), N_ID, dtype=torch.long, pin_memory=pin)
        view = tokens.numpy()
        for window, row, offset in zip(pending, rows, offsets):
            view[row, offset:offset + window.ids.size] = window.ids
            if lead is not None:
                view[row, offset - 1] = lead
        batch = WindowBatch(list(pending), tokens, lengths, rows, offsets)
        if len(fills) == len(pending) and all(slot == 0 for _, slot in placed):
            return batch  # one window per row, from its start: plain causal rows
        positions = np.zeros(view.shape, dtype=np.int64)
        for row, fill in enumerate(fills):  # the padding at a row's end counts as one more document
            positions[row, fill:] = np.arange(view.shape[1] - fill)
        for window, row, offset in zip(pending, rows, offsets):
            positions[row, offset - extra:offset + window.ids.size] = np.arange(window.ids.size + extra)
        cu_seqlens, batch.max_seqlen = host_document_offsets(positions)
        batch.position_ids = _host_tensor(positions, pin)
        batch.cu_seqlens = _host_tensor(cu_seqlens, pin)
        steps = np.arange(int(lengths.max()))[None, :]
        gather = (rows * view.shape[1] + offsets)[:, None] + steps
        batch.gather = _host_tensor(np.where(steps < lengths[:, None], gather, view.size), pin)
        return batch

    for window in windows:
        need = int(window.ids.size) + extra
        grown = max(capacity, need, row_tokens or 0)
        row = next((r for r, fill in enumerate(fills) if fill + need <= grown), len(fills))
        fill = fills[row] if row < len(fills) else 0
        cost = max(width, fill + need) * (len(fills) + (row == len(fills)))
        if pending and (cost > batch_tokens or (max_windows and len(pending) >= max_windows)):
            yield emit()
            pending.clear()
            placed.clear()
            fills.clear()
            capacity = width = 0
            grown, row, fill = max(need, row_tokens or 0), 0, 0
        if row == len(fills):
            fills.append(0)
        pending.append(window)
        placed.append((row, fill))
        fills[row] = fill + need
        capacity, width = grown, max(width, fill + need)
    if pending:
        yield emit()


def _host_tensor(array: np.ndarray, pin: bool) -> Tensor:
    """A host tensor of ``array``, pinned for an asynchronous copy to a CUDA device."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    return tensor.pin_memory() if pin else tensor


_DONE = object()


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def prefetch(items: Iterable[T], depth: int = 4) -> Iterator[T]:
    """``items`` produced by a background thread, at most ``depth`` ahead of the consumer.

    Reading FASTA (decompression, pysam) and tokenising release the GIL for most of their time, so a
    thread overlaps them with the device's work. An exception in the producer is raised here, in the
    consumer, at the point its item would have come; a consumer that stops early stops the thread."""
    channel: queue.Queue = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        channel.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            channel.put(_DONE)
        except BaseException as exc:  # handed to the consumer, which re-raises it
            channel.put(_Failure(exc))

    worker = threading.Thread(target=produce, name="biomoe-read-ahead", daemon=True)
    worker.start()
    try:
        while True:
            item = channel.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.exc
            yield item
    finally:
        stop.set()
        while worker.is_alive():  # unblock a producer waiting on a full queue
            try:
                channel.get_nowait()
            except queue.Empty:
                worker.join(timeout=0.05)


@dataclass
class _InFlight(Generic[T]):
    batch: WindowBatch[T]
    host: dict[str, Tensor]
    done: torch.cuda.Event | None


def run_batches(batches: Iterable[WindowBatch[T]], device: torch.device,
                compute: Callable[[Tensor, WindowBatch[T]], Mapping[str, Tensor]],
                consume: Callable[[WindowBatch[T], dict[str, np.ndarray]], Any], in_flight: int = 2) -> None:
    """For each batch: ``compute(device tokens, batch)`` -> named device tensors, copied back and
    handed to ``consume(batch, numpy arrays)`` in order, up to ``in_flight`` batches after they were
    queued (CUDA), or at once (CPU). On a CPU the thread count of the batches is chosen by
    measurement (:class:`~biomoe.inference.cpu_threads.CpuThreadChoice`)."""
    pending: deque[_InFlight[T]] = deque()
    cuda = device.type == "cuda"
    threads = CpuThreadChoice(device)

    def finish(item: _InFlight[T]) -> None:
        if item.done is not None:
            item.done.synchronize()
        consume(item.batch, {name: t.numpy() for name, t in item.host.items()})

    try:
        for batch in batches:
            tokens = batch.tokens.to(device, non_blocking=cuda)
            host: dict[str, Tensor] = {}
            with threads.batch(int(batch.tokens.numel())):
                outputs = compute(tokens, batch)
                for name, value in outputs.items():
                    if cuda:
                        buffer = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
                        buffer.copy_(value, non_blocking=True)
                        host[name] = buffer
                    else:
                        host[name] = value.detach().cpu()
            done = None
            if cuda:
                done = torch.cuda.Event()
                done.record()
            pending.append(_InFlight(batch, host, done))
            while len(pending) > in_flight or (pending and pending[0].done is not None and pending[0].done.query()):
                finish(pending.popleft())
        while pending:
            finish(pending.popleft())
    finally:
        threads.restore()


def genome_windows(genome: SequenceReader, window: int, chunk_bases: int = 1 << 20) -> Iterator[Window]:
    """Consecutive ``window``-base windows of every contig (the last of a contig may be shorter),
    keyed ``(contig name, start)``; read and tokenised ``chunk_bases`` at a time, so a long contig
    costs few reads."""
    tokenizer = NucleotideTokenizer()
    step = max(window, chunk_bases // window * window)
    for info in genome.contigs:
        for chunk_start in range(0, info.length, step):
            chunk_end = min(chunk_start + step, info.length)
            ids = tokenizer.encode(genome.fetch(info.name, chunk_start, chunk_end))
            for offset in range(0, ids.size, window):
                yield Window((info.name, chunk_start + offset), ids[offset:offset + window])


def check_window_memory(window: int, model: torch.nn.Module, longest: int | None = None,
                        option: str = "--window") -> None:
    """One window is one forward pass however small ``--batch-tokens`` is: a window far beyond what
    the device holds is one line naming the option now, not the allocator's traceback mid-run.

    The estimate is a floor, not a forecast: per token the residual stream, the experts' inputs and
    the logits in fp32, and on the CPU (whose attention materialises its scores) a score matrix per
    head. Only a window that cannot fit by that floor is refused; no window is longer than the
    ``longest`` contig it is cut from."""
    config = model.config
    tokens = min(window, longest) if longest else window
    try:
        device = next(model.parameters()).device
    except (StopIteration, AttributeError):
        device = torch.device("cpu")
    per_token = 4 * (8 * config.hidden_size + 3 * config.top_k * config.ffn_hidden_size + config.vocab_size)
    needed = tokens * per_token + (4 * config.num_heads * tokens * tokens if device.type == "cpu" else 0)
    available = torch.cuda.mem_get_info(device)[1] if device.type == "cuda" else host_memory_bytes()
    if available is not None and needed > available:
        raise GenomeInputError(None, f"{option} {window:,}: one window needs at least {needed / 1e9:,.0f} GB on "
                                     f"{device.type}, more than its {available / 1e9:,.0f} GB; use a shorter {option} "
                                     "(the training length is the default)")
