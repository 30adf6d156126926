"""Drawing the next base from the model's distribution, with randomness that batching cannot change.

Only A, C, G and T are emitted (N too with ``allow_n``): the model's vocabulary also holds
special tokens and IUPAC ambiguity codes, which are never valid output. ``temperature`` scales the
logits (0 = always the most likely base), ``top_k`` keeps the k most likely bases and ``top_p``
the smallest set whose probability reaches p (nucleus sampling), applied in that order.

Every sample draws its randomness from its own stream seeded by ``(seed, sample number)``
(:class:`SampleNoise`), so a sample does not change when ``batch_size`` or ``num_samples`` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from biomoe.data.tokenizer import A_ID, C_ID, G_ID, N_ID, T_ID

__all__ = ["DEFAULT_SAMPLING", "NOISE_BLOCK", "SampleNoise", "SamplingSettings", "emitted_token_ids", "sample_next"]

NOISE_BLOCK = 1024
"""Uniforms drawn per sample at a time (one host->device copy per block)."""


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



DEFAULT_SAMPLING = SamplingSettings()
"""Plain sampling from the model's distribution: temperature 1, no top-k or top-p, no N."""

def emitted_token_ids(allow_n: bool = False) -> list[int]:
    """The token ids generation may produce: A, C, G, T (and N)."""
    return [A_ID, C_ID, G_ID, T_ID] + ([N_ID] if allow_n else [])


def sample_next(logits: Tensor, settings: SamplingSettings, uniforms: Tensor) -> Tensor:
    """Token ids [b] drawn from ``logits`` [b, vocab] under ``settings``.

    Sampling is by inverse CDF on ``uniforms`` [b] (in [0, 1)) rather than ``torch.multinomial``,
    so the random numbers come from per-sample streams the caller controls. Every operation is on
    the device with fixed shapes (no host sync), so it runs inside a captured CUDA graph too.
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


class SampleNoise:
    """Uniform random numbers, one independent stream per sample (numpy's SeedSequence)."""

    def __init__(self, seed: int, sample_ids: range, device: torch.device) -> None:
        self._rngs = [np.random.default_rng([seed, i]) for i in sample_ids]
        self._device = device
        self._block: Tensor | None = None
        self._used = NOISE_BLOCK

    def block(self) -> np.ndarray:
        """The next ``NOISE_BLOCK`` uniforms of every stream, [NOISE_BLOCK, samples]."""
        return np.stack([rng.random(NOISE_BLOCK) for rng in self._rngs], axis=1)

    def next(self) -> Tensor:
        if self._used == NOISE_BLOCK:
            self._block = torch.from_numpy(self.block()).to(self._device)
            self._used = 0
        assert self._block is not None
        self._used += 1
        return self._block[self._used - 1]
