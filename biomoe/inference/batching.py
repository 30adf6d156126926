"""Windows of sequence in, per-window results out, with the device never waiting for the host.

Every throughput command (score-fasta, score-variants, embed) is the same loop: cut the input into
windows, run the network on many windows at once, hand each window's result to a writer. Done
naively (one window, then a copy back, then the next) the GPU idles while Python reads FASTA,
tokenises and writes. Here the three stages overlap:

1. a background thread reads and tokenises windows and packs them into pinned host batches of up
   to ``batch_tokens`` tokens (:func:`pack_windows`, :func:`prefetch`);
2. the main thread copies a batch to the device without blocking and queues its forward pass and
   the copy of its (small) results back into pinned memory;
3. a batch's results are handed to the writer only once the device has finished it, while the next
   batches are already queued, so the host synchronises once per batch, a batch behind.

Windows of different lengths share a batch, padded on the right: the network is causal and routes
every token on its own (no capacity limit), so padding changes no real position's result.
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

from biomoe.data.reader import SequenceReader
from biomoe.data.tokenizer import N_ID, NucleotideTokenizer
from biomoe.errors import GenomeInputError
from biomoe.resources import host_memory_bytes

__all__ = ["DEFAULT_BATCH_TOKENS", "Window", "WindowBatch", "batches_for", "check_window_memory", "default_batch_tokens", "genome_windows", "pack_windows",
           "prefetch", "run_batches"]

DEFAULT_BATCH_TOKENS = {"cuda": 1 << 18, "cpu": 1 << 13}
"""Tokens per forward pass by device type: on an H200 a hidden-512 network scores 3 % faster at
262,144 tokens than at 131,072 (6 GB of activations) and 16 % slower at 65,536; on a CPU, small
enough that progress moves."""

T = TypeVar("T")


def default_batch_tokens(device: torch.device | str) -> int:
    return DEFAULT_BATCH_TOKENS.get(torch.device(device).type, DEFAULT_BATCH_TOKENS["cpu"])


def batches_for(windows: Iterable[Window[T]], device: torch.device, batch_tokens: int | None = None,
                max_rows: int | None = None) -> Iterator[WindowBatch[T]]:
    """:func:`pack_windows` read ahead in a background thread, as ``device`` wants them: pinned and
    mixing window lengths on CUDA (bf16 rounding dwarfs padding's), unpadded on a CPU."""
    cuda = device.type == "cuda"
    return prefetch(pack_windows(windows, batch_tokens or default_batch_tokens(device), max_rows, pin=cuda,
                                 mixed_lengths=cuda))


@dataclass(frozen=True)
class Window(Generic[T]):
    """One stretch of tokens and whatever the writer needs to place its result (``key``)."""

    key: T
    ids: np.ndarray  # int64 token ids


@dataclass
class WindowBatch(Generic[T]):
    """Windows stacked into one ``[rows, longest]`` int64 tensor (pinned on a CUDA run), right-padded
    with N; ``lengths[i]`` is the real length of row i."""

    windows: list[Window[T]]
    tokens: Tensor
    lengths: np.ndarray

    @property
    def real_tokens(self) -> int:
        return int(self.lengths.sum())


def pack_windows(windows: Iterable[Window[T]], batch_tokens: int, max_rows: int | None = None,
                 pin: bool = False, mixed_lengths: bool = True) -> Iterator[WindowBatch[T]]:
    """Group consecutive windows into batches whose padded size ``rows x longest`` stays within
    ``batch_tokens`` (a window longer than the budget is a batch of its own); ``max_rows`` caps the
    rows. Order is kept, so writers see windows in input order.

    ``mixed_lengths=False`` starts a new batch whenever the window length changes, so no row is
    padded: a CPU's fp32 kernels then give every window the very numbers it gets alone (padding
    changes the blocking of the matmuls and attention, hence the last bits of rounding)."""
    pending: list[Window[T]] = []
    longest = 0

    def emit() -> WindowBatch[T]:
        lengths = np.array([w.ids.size for w in pending], dtype=np.int64)
        tokens = torch.full((len(pending), int(lengths.max(initial=1))), N_ID, dtype=torch.long,
                            pin_memory=pin)
        view = tokens.numpy()
        for row, window in enumerate(pending):
            view[row, :window.ids.size] = window.ids
        return WindowBatch(list(pending), tokens, lengths)

    for window in windows:
        grown = max(longest, int(window.ids.size))
        if pending and (grown * (len(pending) + 1) > batch_tokens or (max_rows and len(pending) >= max_rows)
                        or (not mixed_lengths and window.ids.size != pending[-1].ids.size)):
            yield emit()
            pending.clear()
            grown = int(window.ids.size)
        pending.append(window)
        longest = grown
    if pending:
        yield emit()


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
    queued (CUDA), or at once (CPU)."""
    pending: deque[_InFlight[T]] = deque()
    cuda = device.type == "cuda"

    def finish(item: _InFlight[T]) -> None:
        if item.done is not None:
            item.done.synchronize()
        consume(item.batch, {name: t.numpy() for name, t in item.host.items()})

    for batch in batches:
        tokens = batch.tokens.to(device, non_blocking=cuda)
        outputs = compute(tokens, batch)
        host: dict[str, Tensor] = {}
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
