"""Sampling DNA from a trained model, one base at a time (what ``biomoe generate`` runs).

Sampling reads the model's next-base distribution one base at a time. A :class:`KVCache` keeps
the keys and values of everything already read, so each new base costs one token's forward pass
and a sample of ``L`` bases costs time linear in ``L`` (without it, quadratic).

Only A, C, G and T are emitted (N too with ``allow_n``): the model's vocabulary also holds
special tokens and IUPAC ambiguity codes, which are never valid output. ``temperature`` scales the
logits (0 = always the most likely base), ``top_k`` keeps the k most likely bases and ``top_p``
the smallest set whose probability reaches p (nucleus sampling), applied in that order.

The model was trained on windows of ``context`` tokens that start with ``<bos>``. When a sample
outgrows that context, generation continues from a fresh cache that holds ``<bos>`` and the last
half-context bases, exactly as a training window would start, instead of feeding the model
positions it has never seen. The cost stays linear (one refill per half context).

Every sample draws its randomness from its own stream seeded by ``(seed, sample number)``, so a
sample does not change when ``batch_size`` or ``num_samples`` does.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from biomoe.data.tokenizer import A_ID, BOS_ID, C_ID, G_ID, N_ID, T_ID
from biomoe.model.transformer import KVCache, MoETransformer

__all__ = ["SamplingSettings", "emitted_token_ids", "generate", "parse_region", "sample_next"]

_NOISE_BLOCK = 1024  # uniforms drawn per sample at a time (one host->device copy per block)


@dataclass(frozen=True)
class SamplingSettings:
    """How the next base is drawn from the model's distribution."""

    temperature: float = 1.0
    """Divides the logits: < 1 sharpens, > 1 flattens; 0 = greedy (always the most likely base)."""
    top_k: int | None = None
    """Keep only the k most likely bases (None = all)."""
    top_p: float | None = None
    """Keep the smallest set of bases whose probability reaches p (None = all)."""
    allow_n: bool = False
    """Let the model emit N (unknown base) besides A/C/G/T."""

    def __post_init__(self) -> None:
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


def emitted_token_ids(allow_n: bool = False) -> list[int]:
    """The token ids generation may produce: A, C, G, T (and N)."""
    return [A_ID, C_ID, G_ID, T_ID] + ([N_ID] if allow_n else [])


def sample_next(logits: Tensor, settings: SamplingSettings, uniforms: Tensor) -> Tensor:
    """Token ids [b] drawn from ``logits`` [b, vocab] under ``settings``.

    Sampling is by inverse CDF on ``uniforms`` [b] (in [0, 1)) rather than ``torch.multinomial``,
    so the random numbers come from per-sample streams the caller controls.
    """
    first, last = A_ID, (N_ID if settings.allow_n else T_ID)  # the emitted ids are one contiguous range
    scores = logits[:, first:last + 1].double()
    if settings.temperature == 0:
        return first + scores.argmax(-1)
    scores = scores / settings.temperature
    if settings.top_k is not None and settings.top_k < scores.shape[-1]:
        kth = scores.topk(settings.top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    probs = scores.softmax(-1)
    if settings.top_p is not None and settings.top_p < 1:
        sorted_probs, order = probs.sort(-1, descending=True)
        mass_before = sorted_probs.cumsum(-1) - sorted_probs  # the most likely base is always kept
        drop = torch.zeros_like(order, dtype=torch.bool).scatter(-1, order, mass_before >= settings.top_p)
        probs = probs.masked_fill(drop, 0.0)
    cdf = probs.cumsum(-1)
    threshold = uniforms.to(device=cdf.device, dtype=cdf.dtype)[:, None] * cdf[:, -1:]
    # Token j is chosen when cdf[j-1] <= threshold < cdf[j]: never a token of probability zero.
    choice = (cdf <= threshold).sum(-1).clamp_(max=probs.shape[-1] - 1)
    return first + choice


class _SampleNoise:
    """Uniform random numbers, one independent stream per sample (numpy's SeedSequence)."""

    def __init__(self, seed: int, sample_ids: range, device: torch.device) -> None:
        self._rngs = [np.random.default_rng([seed, i]) for i in sample_ids]
        self._device = device
        self._block: Tensor | None = None
        self._used = _NOISE_BLOCK

    def next(self) -> Tensor:
        if self._used == _NOISE_BLOCK:
            block = np.stack([rng.random(_NOISE_BLOCK) for rng in self._rngs], axis=1)
            self._block = torch.from_numpy(block).to(self._device)
            self._used = 0
        assert self._block is not None
        self._used += 1
        return self._block[self._used - 1]


@torch.no_grad()
def generate(model: MoETransformer, prompt: np.ndarray | None, length: int, num_samples: int = 1,
             settings: SamplingSettings = SamplingSettings(), seed: int = 0, batch_size: int = 16,
             context: int | None = None, progress=None) -> list[np.ndarray]:
    """``num_samples`` continuations of ``prompt`` (token ids; None or empty = from ``<bos>`` alone),
    ``length`` bases each, as token-id arrays.

    ``context`` caps the tokens the model attends to (``<bos>`` included); None = no cap.
    ``progress`` (a tqdm-like object) is advanced by one per generated base.
    """
    if length < 1 or num_samples < 1 or batch_size < 1:
        raise ValueError("length, num_samples and batch_size must be >= 1")
    if context is not None and context < 2:
        raise ValueError(f"context must be >= 2 tokens (<bos> and a base), got {context}")
    prompt_ids = np.zeros(0, dtype=np.int64) if prompt is None else np.asarray(prompt, dtype=np.int64)
    samples: list[np.ndarray] = []
    for first in range(0, num_samples, batch_size):
        rows = range(first, min(first + batch_size, num_samples))
        samples.extend(_generate_batch(model, prompt_ids, length, rows, settings, seed, context, progress))
    return samples


def _generate_batch(model: MoETransformer, prompt: np.ndarray, length: int, rows: range,
                    settings: SamplingSettings, seed: int, context: int | None, progress) -> list[np.ndarray]:
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    b = len(rows)
    max_tokens = 1 + len(prompt) + length  # <bos>, prompt, generated bases: all a sample can feed
    max_tokens = max_tokens if context is None else min(context, max_tokens)
    keep = max(1, (max_tokens - 1) // 2)  # bases carried into a refilled cache
    history = torch.from_numpy(prompt).to(device).expand(b, -1)  # prompt + generated so far
    generated = torch.empty(b, length, dtype=torch.long, device=device)
    cache = KVCache(model.config, b, max_tokens, device=device, dtype=dtype)
    noise = _SampleNoise(seed, rows, device)

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
