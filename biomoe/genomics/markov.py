"""Order-k Markov baselines for nucleotide sequences.

A genomic language model is only interesting if it beats k-mer statistics, so every held-out
bits/base number needs this baseline next to it. The model here is fitted on the *training*
split (counts of (k-mer context, next base), add-α smoothing) and scored through
:func:`biomoe.model.losses.masked_cross_entropy_sum` on the very batches the network sees: the Markov
model turns a batch's ``labels`` into log-probability "logits" of the network's shape, so both
numbers come from one loss function over one set of positions (same ``loss_mask``).

Everything is vectorised (``np.bincount`` for fitting, shifted tensor arithmetic for scoring); the
only Python loops run over the order, never over bases, so a bacterial genome fits in about a
second.

Context rules, identical for fitting and scoring: the context of a base is the ``order`` bases
before it inside the same sequence (window). Where fewer than ``order`` unambiguous (A/C/G/T)
bases precede it — at a window start or after an N — the longest available suffix is used, i.e.
the model backs off to a lower order (order 0 at worst), so every scored position gets a proper
distribution.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from biomoe.data.splits import split_regions
from biomoe.data.tokenizer import A_ID, NucleotideTokenizer

__all__ = ["MarkovModel", "count_kmers", "MAX_ORDER", "training_sequences"]

MAX_ORDER = 12
"""4^(12+1) int64 counters are 0.5 GB; beyond that a dense table is the wrong data structure."""

_NEG = -1.0e4  # "impossible" logit for non-ACGT tokens (finite: avoids inf - inf in softmax)


def base_codes(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Base codes 0..3 (A, C, G, T) and a mask of where the id is one of them."""
    ids = np.asarray(ids, dtype=np.int64)
    valid = NucleotideTokenizer.unambiguous_mask(ids)
    return np.where(valid, ids - A_ID, 0), valid


def count_kmers(ids: np.ndarray, max_order: int) -> list[np.ndarray]:
    """Transition counts of one sequence for every order 0..max_order.

    Returns ``counts[o]`` of shape ``[4**o, 4]``: ``counts[o][c, b]`` is how often base ``b``
    followed the o-mer with base-4 code ``c`` (oldest base most significant). Only positions whose
    whole (o+1)-mer is A/C/G/T are counted.
    """
    codes, valid = base_codes(ids)
    n = codes.size
    counts: list[np.ndarray] = []
    ctx = np.zeros(n, dtype=np.int64)
    ok = valid.copy()  # context of length o available and target valid
    for order in range(max_order + 1):
        if order > 0:
            new_ctx = np.zeros(n, dtype=np.int64)
            new_ctx[1:] = ctx[:-1] * 4 + codes[:-1]
            new_ok = np.zeros(n, dtype=bool)
            new_ok[1:] = ok[:-1] & valid[1:]
            # ok[t-1] says bases t-order..t-1 are valid (a context of order-1 plus its target)
            ctx, ok = new_ctx, new_ok
        flat = ctx[ok] * 4 + codes[ok]
        counts.append(np.bincount(flat, minlength=4 ** (order + 1)).reshape(4 ** order, 4))
    return counts


@dataclass
class MarkovModel:
    """Add-α smoothed order-k Markov chain over A/C/G/T with back-off at sequence starts.

    ``log_probs[o]`` is a ``[4**o, 4]`` table of natural-log next-base probabilities for every
    order ``o <= order`` (the lower orders are the back-off).
    """

    order: int
    alpha: float
    log_probs: list[np.ndarray]
    num_bases: int

    @classmethod
    def fit(cls, sequences: Iterable[np.ndarray], order: int, alpha: float = 1.0,
            reverse_complement: bool = True) -> "MarkovModel":
        """Count k-mers over token-id arrays (one per training region).

        ``reverse_complement=True`` also counts the reverse strand: the network is trained with
        random reverse complements, so the baseline sees the same two strands.
        """
        if not 0 <= order <= MAX_ORDER:
            raise ValueError(f"Markov order must be in 0..{MAX_ORDER}, got {order}")
        if alpha <= 0:
            raise ValueError(f"add-alpha smoothing needs alpha > 0, got {alpha}")
        tokenizer = NucleotideTokenizer()
        totals = [np.zeros((4 ** o, 4), dtype=np.int64) for o in range(order + 1)]
        num_bases = 0
        for ids in sequences:
            ids = np.asarray(ids, dtype=np.int64)
            strands = [ids, tokenizer.reverse_complement(ids)] if reverse_complement else [ids]
            for strand in strands:
                for total, counts in zip(totals, count_kmers(strand, order)):
                    total += counts
            num_bases += int(NucleotideTokenizer.unambiguous_mask(ids).sum())
        log_probs = [np.log((c + alpha) / (c.sum(axis=1, keepdims=True) + 4 * alpha)) for c in totals]
        return cls(order, float(alpha), log_probs, num_bases)

    def truncated(self, order: int) -> "MarkovModel":
        """The same counts seen as a lower-order model (one fit serves a whole k=0..K table)."""
        if not 0 <= order <= self.order:
            raise ValueError(f"order {order} is outside 0..{self.order}")
        return MarkovModel(order, self.alpha, self.log_probs[: order + 1], self.num_bases)

    def logits(self, labels: Tensor, vocab_size: int) -> Tensor:
        """Log-probabilities shaped like a network's logits: ``[batch, seq, vocab_size]`` fp32.

        Position t predicts ``labels[..., t]`` from ``labels[..., :t]`` (the same causal set the
        network sees through ``input_ids = [BOS] + labels[:-1]``). Non-ACGT vocabulary entries get
        a large negative value, so ``log_softmax`` of the result is the Markov distribution itself.
        """
        device = labels.device
        flat_table, offsets = self._flat_table(device)
        valid = NucleotideTokenizer.unambiguous_mask(labels)
        codes = torch.where(valid, labels - A_ID, torch.zeros_like(labels)).long()
        ctx = torch.zeros_like(codes)
        ok = torch.ones_like(valid)  # order 0 is always available
        row = torch.full_like(codes, int(offsets[0]))
        for order in range(1, self.order + 1):
            new_ctx = torch.zeros_like(ctx)
            new_ctx[..., 1:] = ctx[..., :-1] * 4 + codes[..., :-1]
            new_ok = torch.zeros_like(ok)
            new_ok[..., 1:] = ok[..., :-1] & valid[..., :-1]
            ctx, ok = new_ctx, new_ok
            row = torch.where(ok, offsets[order] + ctx, row)
        base_logp = flat_table[row]  # [batch, seq, 4]
        out = torch.full((*labels.shape, vocab_size), _NEG, dtype=torch.float32, device=device)
        out[..., A_ID:A_ID + 4] = base_logp
        return out

    def _flat_table(self, device: torch.device) -> tuple[Tensor, Tensor]:
        cache = getattr(self, "_device_cache", None)
        if cache is None or cache[0] != device:
            table = torch.from_numpy(np.concatenate(self.log_probs, axis=0)).float().to(device)
            sizes = [4 ** o for o in range(self.order + 1)]
            offsets = torch.tensor(np.concatenate(([0], np.cumsum(sizes)[:-1])), device=device)
            cache = (device, table, offsets)
            object.__setattr__(self, "_device_cache", cache)
        return cache[1], cache[2]


def training_sequences(datamodule: Any) -> Iterator[np.ndarray]:
    """Token ids of every training region of a set-up :class:`~biomoe.data.datamodule.GenomeDataModule`.

    Regions are the datamodule's own training regions (validation, test and held-out files
    excluded), so the baseline never sees a held-out base.
    """
    genome = datamodule.genome
    train = getattr(datamodule, "train_regions", None)
    if train is None:
        train, _ = split_regions(genome, datamodule.val_contigs, datamodule.val_fraction)
    for contig, lo, hi in train:
        yield datamodule.tokenizer.encode(genome.fetch(contig, lo, hi))
