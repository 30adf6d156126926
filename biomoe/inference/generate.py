"""Sampling DNA from a trained model, one base at a time (what ``biomoe generate`` runs).

Sampling reads the model's next-base distribution one base at a time. A KV cache keeps the keys
and values of everything already read, so each new base costs one token's forward pass and a
sample of ``L`` bases costs time linear in ``L`` (without it, quadratic). How each base is drawn
(only A/C/G/T, temperature, top-k, top-p, one random stream per sample, so a sample does not change
when ``batch_size`` or ``num_samples`` does) is :mod:`~biomoe.inference.sampling`.

The model was trained on windows of ``context`` tokens that start with ``<bos>``. When a sample
outgrows that context, generation continues from a fresh cache that holds ``<bos>`` and the last
half-context bases, exactly as a training window would start, instead of feeding the model
positions it has never seen. The cost stays linear (one refill per half context).

How a step runs (``decode``):

* On a GPU (``auto``), the step has fixed shapes and is captured once as a CUDA graph, replayed
  for every base with no host sync between bases (:class:`~biomoe.inference.static_decoder.StaticDecoder`,
  on the graph-safe kernels of :func:`~biomoe.inference.decode_kernels.decode_kernels`). A model
  with a part not known to be graph-safe (:func:`~biomoe.inference.decode_kernels.decode_graph_supported`)
  runs the same step eagerly, said once as a warning; ``static`` always runs it eagerly.
* On a CPU (``auto``, or ``dynamic`` anywhere), the growing :class:`~biomoe.model.transformer.KVCache`
  attends over the filled part only: the reference path, whose samples for a seed stay fixed.

On a CPU every step runs on one intra-op thread (:func:`decode_threads`). A step's operations are
a few samples' worth of one token each: splitting them over threads costs more in waking and
joining the threads than it saves, and on a machine whose cores other work also uses, a step
waits for the busiest core at every operation (the profile of a loaded 2-core machine showed
small matrix products taking milliseconds each). The thread count is restored afterwards.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor

from biomoe.data.tokenizer import BOS_ID
from biomoe.inference.decode_kernels import decode_graph_supported
from biomoe.inference.load import InferenceModel
from biomoe.inference.sampling import DEFAULT_SAMPLING, SampleNoise, SamplingSettings, sample_next
from biomoe.inference.static_decoder import StaticDecoder
from biomoe.model.transformer import KVCache, MoETransformer

__all__ = ["DECODE_MODES", "decode_threads", "default_batch_size", "generate", "parse_region"]

DECODE_MODES = ("auto", "static", "dynamic")
"""``auto``: a CUDA graph of the static-cache step on a GPU (eager where the model is not
graph-safe), the dynamic cache on a CPU; ``static``: the static-cache step, eager; ``dynamic``:
the growing :class:`KVCache`, eager."""


def default_batch_size(device: torch.device | str) -> int:
    """Samples decoded together: 64 on a GPU (a step costs about the same for 1 or 64 samples),
    16 on a CPU."""
    return 64 if torch.device(device).type == "cuda" else 16


@contextlib.contextmanager
def decode_threads(device: torch.device) -> Iterator[None]:
    """One intra-op thread while decoding on a CPU (see the module docstring); as it is elsewhere."""
    if device.type != "cpu" or torch.get_num_threads() == 1:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# -------------------------------------------------------------------------------------- generation
@torch.inference_mode()
def generate(model: InferenceModel | MoETransformer, prompt: np.ndarray | None, length: int, num_samples: int = 1,
             settings: SamplingSettings = DEFAULT_SAMPLING, seed: int = 0, batch_size: int | None = None,
             context: int | None = None, progress=None, decode: str = "auto") -> list[np.ndarray]:
    """``num_samples`` continuations of ``prompt`` (token ids; None or empty = from ``<bos>`` alone),
    ``length`` bases each, as token-id arrays.

    ``model`` is an :class:`~biomoe.inference.load.InferenceModel` or a bare module (run as it
    stands). ``batch_size``: samples decoded together (None: :func:`default_batch_size`).
    ``context`` caps the tokens the model attends to (``<bos>`` included); None = no cap.
    ``progress`` (a tqdm-like object) is advanced by one per generated base. ``decode``: one of
    :data:`DECODE_MODES` (see the module docstring).
    """
    if length < 1 or num_samples < 1 or (batch_size is not None and batch_size < 1):
        raise ValueError("length, num_samples and batch_size must be >= 1")
    if context is not None and context < 2:
        raise ValueError(f"context must be >= 2 tokens (<bos> and a base), got {context}")
    if decode not in DECODE_MODES:
        raise ValueError(f"decode must be one of {', '.join(DECODE_MODES)}, got {decode!r}")
    model = InferenceModel.wrap(model)
    batch_size = batch_size or default_batch_size(model.device)
    prompt_ids = np.zeros(0, dtype=np.int64) if prompt is None else np.asarray(prompt, dtype=np.int64)
    max_tokens = 1 + len(prompt_ids) + length  # <bos>, prompt, generated bases: all a sample can feed
    max_tokens = max_tokens if context is None else min(context, max_tokens)
    use_graph = False
    if decode == "auto" and model.device.type == "cuda":
        use_graph, reason = decode_graph_supported(model)
        if not use_graph:
            warnings.warn(f"generate: decoding eagerly, without a CUDA graph: {reason}", stacklevel=2)
    static = decode == "static" or (decode == "auto" and model.device.type == "cuda")
    samples: list[np.ndarray] = []
    decoder: StaticDecoder | None = None
    with decode_threads(model.device):
        for first in range(0, num_samples, batch_size):
            rows = range(first, min(first + batch_size, num_samples))
            if not static:
                samples.extend(_generate_batch(model, prompt_ids, length, rows, settings, seed, max_tokens, progress))
                continue
            if decoder is None or decoder.batch_size != len(rows):
                decoder = None  # one set of buffers at a time: the last batch may be smaller
                decoder = StaticDecoder(model, len(rows), length, max_tokens, settings, use_graph)
            samples.extend(decoder.run(prompt_ids, SampleNoise(seed, rows, model.device), progress))
    return samples


def _generate_batch(model: InferenceModel, prompt: np.ndarray, length: int, rows: range,
                    settings: SamplingSettings, seed: int, max_tokens: int, progress) -> list[np.ndarray]:
    """One batch through the growing :class:`KVCache` (the CPU reference path); ``max_tokens`` is
    the most a sample's cache holds (:func:`generate`'s, the context cap included)."""
    device, dtype = model.device, model.dtype
    b = len(rows)
    keep = max(1, (max_tokens - 1) // 2)  # bases carried into a refilled cache
    history = torch.from_numpy(prompt).to(device).expand(b, -1)  # prompt + generated so far
    generated = torch.empty(b, length, dtype=torch.long, device=device)
    cache = KVCache(model.config, b, max_tokens, device=device, dtype=dtype)
    noise = SampleNoise(seed, rows, device)

    def refill(tail: Tensor) -> Tensor:
        """Start a fresh cache from <bos> + ``tail`` and return the next-token logits."""
        cache.length = 0
        tokens = torch.cat([torch.full((b, 1), BOS_ID, device=device, dtype=torch.long), tail], dim=1)
        return model(tokens, cache=cache).logits[:, -1]

    logits = refill(history[:, len(prompt) - min(len(prompt), max_tokens - 1):])
    for t in range(length):
        token = sample_next(logits.float(), settings, noise.next())
        generated[:, t] = token
        if progress is not None:
            progress.update(b)
        if t == length - 1:
            break
        if cache.length < max_tokens:
            logits = model(token[:, None], cache=cache).logits[:, -1]
        else:
            so_far = torch.cat([history, generated[:, :t + 1]], dim=1)
            logits = refill(so_far[:, -keep:])
    return list(generated.cpu().numpy())


# ---------------------------------------------------------------------------------------- regions
_REGION = re.compile(r"^(?P<contig>.+?)(?::(?P<start>[\d,]+)-(?P<end>[\d,]+))?$")


def parse_region(text: str) -> tuple[str, int | None, int | None]:
    """``contig:start-end`` (1-based, inclusive, as samtools writes regions; commas allowed) ->
    (contig, 0-based start, end); a bare ``contig`` means all of it (None, None)."""
    match = _REGION.match(text.strip())
    if match is None or not match.group("contig"):
        raise ValueError(f"region {text!r} is not contig:start-end")
    if match.group("start") is None:
        return match.group("contig"), None, None
    start, end = (int(match.group(key).replace(",", "")) for key in ("start", "end"))
    if start < 1 or end < start:
        raise ValueError(f"region {text!r}: start must be >= 1 and end >= start (1-based, inclusive)")
    return match.group("contig"), start - 1, end
