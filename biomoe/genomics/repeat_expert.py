"""A repeat expert: exact long-context matches into the training split, mixed causally with a model.

Why: a genome repeats itself (rRNA operons, IS elements, paralogues, tRNA clusters), and where a
held-out stretch is another copy of a training stretch, the base after a 20-mer context is known
with near certainty. A network regularised not to memorise (input mutation, dropout) predicts such
stretches no better than any other sequence. DNA compressors (XM's copy experts, GeCo's repeat
models) get much of their edge from exactly this, so we add it the same way: as a second expert.

* :class:`RepeatTable` counts, over the training split and its reverse complement, which base
  follows every k-mer context. Nothing from the held-out split goes in.
* :func:`mixture_log_likelihood` mixes a base model (network or Markov) with the table's
  prediction, position by position, as a two-expert Bayesian mixture with fixed-share switching:
  the weight of the repeat expert at position t depends only on bases before t in the same window,
  so the result is a proper causal conditional probability, scored like any model.
* Optionally (``follow_copies``) the expert also keeps following a copy after a mismatch, as XM's
  copy experts do: :meth:`RepeatTable.copy_counts`. An exact k-mer match stops for k bases after
  every substitution; a diverged copy (a paralogue, an older IS element) then still predicts its
  next base, with a confidence learnt from how often the copy has been right so far.

Memory: three arrays of up to 2·(training bases) entries, ~40 bytes per training base (0.2 GB for
a 4.4 Mb bacterium; a 3 Gb genome would need ~120 GB: use it on small genomes).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from biomoe.model.config import ConfigError
from biomoe.genomics.markov import base_codes
from biomoe.data.sources.reader import SequenceReader
from biomoe.data.splits import split_genome
from biomoe.data.tokenizer import A_ID, T_ID, NucleotideTokenizer

__all__ = ["BatchScores", "RepeatExpert", "RepeatTable", "check_settings", "default_k", "fit_on_split",
           "fit_on_training_split", "mix_log_likelihood", "mixture_log_likelihood", "score_batch"]

MAX_K = 31  # 2 bits per base of context plus the next base in one int64
MAX_TRAINING_BASES = 500_000_000  # ~16 GB of table: beyond that a k-mer table is the wrong tool


def check_settings(k: int | None, switch: float, smoothing: float) -> None:
    """One-line ConfigError for settings the expert cannot use (CLI and callback alike)."""
    if k is not None and not 1 <= k <= MAX_K:
        raise ConfigError(f"repeat expert: k must be in 1..{MAX_K}, got {k}")
    if not 0.0 <= switch <= 1.0:
        raise ConfigError(f"repeat expert: switch must be in [0, 1], got {switch}")
    if not smoothing > 0.0:
        raise ConfigError(f"repeat expert: smoothing must be > 0, got {smoothing}")


def default_k(training_bases: int) -> int:
    """A context long enough that a chance match is rare: log4(2·N) + 6 bases (both strands of
    N bases hold ~2N contexts; 6 more bases make a random hit ~4^-6 likely). 18 for E. coli; 16-18
    scored best when tuned inside E. coli's training split (results/quality/repeats)."""
    return int(min(MAX_K, math.ceil(math.log(max(2 * training_bases, 4), 4)) + 6))


def _contexts(codes: np.ndarray, valid: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """For every position p >= k whose k preceding bases are all A/C/G/T: (p, code of codes[p-k:p])."""
    n = codes.size - k
    if n <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    code = np.zeros(n, np.int64)
    ok = np.ones(n, bool)
    for j in range(k):
        code = (code << 2) | codes[j:j + n]
        ok &= valid[j:j + n]
    positions = np.arange(k, codes.size)[ok]
    return positions, code[ok]


GAP = 4  # code of a separator or non-ACGT base in RepeatTable.sequence


class RepeatTable:
    """Counts of the next base after every k-mer of the training sequences (and their reverse
    complements), stored as one sorted array of ``context * 4 + base`` keys and their counts.

    ``sequence`` (base codes 0..3, :data:`GAP` elsewhere) is every training strand end to end, and
    ``positions[i]`` is where key i first occurs in it (the index of its next base): what a copy
    is followed along (:meth:`copy_counts`)."""

    def __init__(self, k: int, keys: np.ndarray, counts: np.ndarray, training_bases: int = 0,
                 sequence: np.ndarray | None = None, positions: np.ndarray | None = None) -> None:
        self.k, self.keys, self.counts, self.training_bases = int(k), keys, counts, int(training_bases)
        self.sequence, self.positions = sequence, positions

    @classmethod
    def fit(cls, sequences: Iterable[np.ndarray], k: int, reverse_complement: bool = True) -> "RepeatTable":
        """``sequences``: token-id arrays, one per training region (never held-out sequence)."""
        check_settings(k, 0.0, 1.0)
        strands, bases = [], 0
        for ids in sequences:
            bases += int(np.asarray(ids).size)
            if bases > MAX_TRAINING_BASES:
                raise ConfigError(f"repeat expert: the training split has over {MAX_TRAINING_BASES:,} bases; "
                                  "its k-mer table would not fit in memory (use it on genomes up to that size)")
            codes, valid = base_codes(ids)
            strands.append(np.where(valid, codes, GAP))
            if reverse_complement:
                strands.append(np.where(valid[::-1], 3 - codes[::-1], GAP))
        # All strands end to end, a GAP after each, so no context spans two of them.
        sequence = np.concatenate([part for strand in strands for part in (strand, [GAP])] or [[]]).astype(np.uint8)
        valid = sequence < GAP
        positions, ctx = _contexts(np.where(valid, sequence, 0).astype(np.int64), valid, k)
        keep = valid[positions]  # the next base must be a base too
        positions = positions[keep]
        keys = ctx[keep] * 4 + sequence[positions]
        unique, first, counts = np.unique(keys, return_index=True, return_counts=True)
        return cls(k, unique, counts.astype(np.float32), bases, sequence, positions[first])

    def __len__(self) -> int:
        return int(self.keys.size)

    def next_base_counts(self, labels: Tensor) -> Tensor:
        """``[..., T]`` token ids -> ``[..., T, 4]`` counts of A/C/G/T after ``labels[..., t-k:t]``.

        Position t is predicted from bases before t in the same row, as a network sees them; rows
        are windows, so the first k positions of a window (and any whose context holds an N) get
        zero counts: the expert has no opinion there."""
        flat = labels.reshape(-1, labels.shape[-1]).cpu().numpy()
        out = np.zeros((*flat.shape, 4), np.float32)
        for row, ids in enumerate(flat):
            codes, valid = base_codes(ids)
            positions, ctx = _contexts(codes, valid, self.k)
            if positions.size == 0 or self.keys.size == 0:
                continue
            for base in range(4):
                key = ctx * 4 + base
                idx = np.minimum(np.searchsorted(self.keys, key), self.keys.size - 1)
                out[row, positions, base] = np.where(self.keys[idx] == key, self.counts[idx], 0.0)
        return torch.from_numpy(out).reshape(*labels.shape, 4).to(labels.device)

    copy_decay = 0.98  # per-base decay of a followed copy's hit and miss counts (see copy_counts)

    def copy_counts(self, labels: Tensor, exact: Tensor, smoothing: float) -> Tensor:
        """Pseudo-counts of the copy being followed, at positions where ``exact``
        (:meth:`next_base_counts`) has none; zero elsewhere.

        Wherever a training k-mer precedes position t, the copy restarts at that k-mer's first
        occurrence in :attr:`sequence`; it then advances one base per position, matched or not.
        Its prediction is the copied base with probability q = (hits + 1) / (hits + misses + 2),
        hits and misses of this copy so far, decayed by :attr:`copy_decay` per base (a new copy starts at
        k hits, the bases of its k-mer), expressed as the count c on that base for which
        ``mixture_log_likelihood``'s (c + smoothing) / (c + 4·smoothing) equals q. Causal: only
        bases before t move the copy or its hits. Settings chosen inside E. coli's training split
        (results/quality/repeats/tune_copies_on_training.json)."""
        if self.sequence is None or self.positions is None:
            raise ValueError("this RepeatTable has no training sequence to follow copies along")
        flat = labels.reshape(-1, labels.shape[-1]).cpu().numpy()
        rows, length = flat.shape
        codes, valid = np.zeros(flat.shape, np.int64), np.zeros(flat.shape, bool)
        anchor = np.full(flat.shape, -1, np.int64)  # where a copy (re)starts: index of the next base
        for row, ids in enumerate(flat):
            codes[row], valid[row] = base_codes(ids)
            positions, ctx = _contexts(codes[row], valid[row], self.k)
            if positions.size and self.keys.size:
                idx = np.minimum(np.searchsorted(self.keys, ctx * 4), self.keys.size - 1)
                found = self.keys[idx] // 4 == ctx
                anchor[row, positions[found]] = self.positions[idx[found]]
        has_exact = exact.reshape(rows, length, 4).sum(-1).cpu().numpy() > 0
        out = np.zeros((rows, length, 4), np.float32)
        pointer = np.full(rows, -1, np.int64)
        hits, misses, decay = np.zeros(rows), np.zeros(rows), self.copy_decay
        every_row = np.arange(rows)
        last = self.sequence.size - 1
        for t in range(length):
            restart = (anchor[:, t] >= 0) & (anchor[:, t] != pointer)
            hits, misses = np.where(restart, float(self.k), hits), np.where(restart, 0.0, misses)
            pointer = np.where(anchor[:, t] >= 0, anchor[:, t], pointer)
            following = (pointer >= 0) & (pointer <= last)
            copied = np.where(following, self.sequence[np.clip(pointer, 0, last)], GAP)
            speak = (copied < GAP) & ~has_exact[:, t]
            q = np.maximum((hits + 1) / (hits + misses + 2), 0.25)
            count = smoothing * (4 * q - 1) / (1 - q)
            out[every_row[speak], t, copied[speak]] = count[speak]
            pointer = np.where(following & (copied == GAP), -1, pointer)  # the strand ended: copy lost
            seen = following & valid[:, t] & (copied < GAP)
            hits = hits * decay + (seen & (copied == codes[:, t]))
            misses = misses * decay + (seen & (copied != codes[:, t]))
            pointer = np.where(pointer >= 0, pointer + 1, pointer)
        return torch.from_numpy(out).reshape(*labels.shape, 4).to(labels.device)


def mixture_log_likelihood(log_probs: Tensor, labels: Tensor, counts: Tensor, switch: float = 0.003,
                           smoothing: float = 0.005, prior: float = 0.5) -> tuple[Tensor, Tensor]:
    """:func:`mix_log_likelihood` of a base model given as ``[B, T, V]`` normalised log-probabilities."""
    base_ll = log_probs.float().gather(-1, labels.long().unsqueeze(-1)).squeeze(-1)
    return mix_log_likelihood(base_ll, labels, counts, switch, smoothing, prior)


def mix_log_likelihood(base_ll: Tensor, labels: Tensor, counts: Tensor, switch: float = 0.003,
                       smoothing: float = 0.005, prior: float = 0.5) -> tuple[Tensor, Tensor]:
    """Per-position log-likelihood of ``labels`` under a causal mixture of a base model and the
    repeat expert, and the repeat expert's weight at each position (before seeing it).

    ``base_ll``: ``[B, T]`` the base model's log-probability of each label (only the label's is
    needed, so per-base scores from :func:`~biomoe.inference.scoring.sequence_log_likelihood` work too).
    ``counts``: :meth:`RepeatTable.next_base_counts`. The expert predicts ``(count + smoothing) /
    (total + 4·smoothing)`` where it has counts and defers to the base model (same probability, so
    no weight moves) where it has none. After each base the weights take their Bayesian posterior,
    then a fixed share ``switch`` moves between the two, so the mixture can hand over at the start
    and end of a repeat copy. Positions whose label is not A/C/G/T leave the weights alone.
    The defaults (switch 0.003, smoothing 0.005) are the best of a grid scored inside E. coli's
    training split with an order-7 Markov base (results/quality/repeats/tune_on_training.json).
    """
    check_settings(None, switch, smoothing)
    if not 0.0 < prior < 1.0:
        raise ConfigError(f"repeat expert: prior must be in (0, 1), got {prior}")
    base_ll = base_ll.float()
    is_base = (labels >= A_ID) & (labels <= T_ID)
    base_idx = torch.where(is_base, labels - A_ID, torch.zeros_like(labels)).long()
    counts = counts.float()
    total = counts.sum(-1)
    repeat_p = (counts.gather(-1, base_idx.unsqueeze(-1)).squeeze(-1) + smoothing) / (total + 4 * smoothing)
    # With counts the expert gives every non-base token probability 0, so the mixture sums to 1.
    repeat_ll = torch.where(total > 0, torch.where(is_base, repeat_p.log(), -torch.inf), base_ll)
    # The recursion is sequential in t: run it in numpy on the host (a few microseconds per step for
    # a whole batch) rather than as ~15 tiny kernel launches per position on a GPU.
    base_np = base_ll.detach().double().cpu().numpy()
    repeat_np = repeat_ll.detach().double().cpu().numpy()
    update = is_base.cpu().numpy()
    weight = np.full(base_np.shape[:-1], float(prior))
    weights_np = np.empty_like(base_np)
    mixed_np = np.empty_like(base_np)
    with np.errstate(divide="ignore", invalid="ignore"):  # log(0) = -inf for a ruled-out base is intended
        for t in range(base_np.shape[-1]):
            w = np.clip(weight, 1e-12, 1 - 1e-12)
            weights_np[..., t] = w
            from_base, from_repeat = np.log1p(-w) + base_np[..., t], np.log(w) + repeat_np[..., t]
            mixed_np[..., t] = np.logaddexp(from_base, from_repeat)
            posterior = np.exp(from_repeat - mixed_np[..., t])
            shared = (1 - switch) * posterior + switch * (1 - posterior)
            weight = np.where(update[..., t], shared, weight)
    mixed = torch.from_numpy(mixed_np).to(base_ll.device, torch.float32)
    weights_before = torch.from_numpy(weights_np).to(base_ll.device, torch.float32)
    return mixed, weights_before


def fit_on_split(genome: SequenceReader, val_contigs: list[str] | None, val_fraction: float, k: int | None = None,
                 tokenizer: NucleotideTokenizer | None = None, **held_out) -> RepeatTable:
    """The table of a genome's training regions (any :class:`~biomoe.data.sources.reader.SequenceReader`) under
    the datamodule's split rule (:func:`~biomoe.data.splits.split_genome`; ``held_out`` its test and
    held-out-file settings; ``val_fraction`` 0 and nothing else held out: all of it).
    ``k`` None is :func:`default_k` of the training length, read from the region bounds."""
    train = split_genome(genome, val_contigs=val_contigs, val_fraction=val_fraction, **held_out).train
    k = k or default_k(sum(hi - lo for _, lo, hi in train))
    tokenizer = tokenizer or NucleotideTokenizer()
    return RepeatTable.fit((tokenizer.encode(genome.fetch(contig, lo, hi)) for contig, lo, hi in train), k)


def fit_on_training_split(datamodule, k: int | None = None) -> RepeatTable:
    """The table of a set-up :class:`~biomoe.data.datamodule.GenomeDataModule`'s training regions (the same
    split its validation uses, so no held-out base goes in)."""
    held_out = {key: getattr(datamodule, key) for key in HELD_OUT_KEYS if hasattr(datamodule, key)}
    return fit_on_split(datamodule.genome, datamodule.val_contigs, datamodule.val_fraction, k, datamodule.tokenizer,
                        **held_out)


HELD_OUT_KEYS = ("test_contigs", "test_fraction", "val_files", "test_files")
"""Datamodule settings besides val_contigs/val_fraction that keep bases out of the training split."""


class BatchScores(NamedTuple):
    """Per-position log-likelihoods of one evaluation batch (``[B, T]``)."""

    base: Tensor  # the base model alone
    exact: Tensor  # mixed with the exact-match expert
    copies: Tensor | None  # mixed with the expert that also follows copies (None unless asked)
    opinion: Tensor  # where a training k-mer precedes the position (exact matches)


def score_batch(table: RepeatTable, log_probs: Tensor, labels: Tensor, switch: float,
                smoothing: float, follow_copies: bool = False) -> BatchScores:
    """One evaluation batch under the base model alone and mixed with the expert; with
    ``follow_copies`` both mixtures, from one lookup of the exact-match counts."""
    labels = labels.to(log_probs.device)
    exact = table.next_base_counts(labels)
    base_ll = log_probs.gather(-1, labels.long().unsqueeze(-1)).squeeze(-1)
    exact_ll, _ = mix_log_likelihood(base_ll, labels, exact, switch, smoothing)
    copies_ll = None
    if follow_copies:
        copies_ll, _ = mix_log_likelihood(base_ll, labels, exact + table.copy_counts(labels, exact, smoothing),
                                          switch, smoothing)
    return BatchScores(base_ll, exact_ll, copies_ll, exact.sum(-1) > 0)


class RepeatExpert:
    """A fitted table with its mixing settings: turns a base model's per-base scores of whole
    sequences into the mixture's (for ``score-fasta --repeat-expert``)."""

    def __init__(self, table: RepeatTable, switch: float = 0.003, smoothing: float = 0.005,
                 follow_copies: bool = False) -> None:
        check_settings(None, switch, smoothing)
        self.table, self.switch, self.smoothing, self.follow_copies = table, switch, smoothing, follow_copies
        self.scored_bases = 0  # A/C/G/T bases mixed so far,
        self.covered_bases = 0  # and of those, how many follow a k-mer of the table

    @property
    def covered_fraction(self) -> float:
        """Share of the bases mixed so far that the table had an opinion on: near 1 means the
        scored sequence is (a copy of) the table's own training sequence."""
        return self.covered_bases / self.scored_bases if self.scored_bases else 0.0

    def mix(self, base_ll: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """``base_ll``: per-base log p (nats, NaN where the base is not A/C/G/T) of the token ids
        ``ids`` of one window, scored from the window's start; returns the mixture's, same shape."""
        labels = torch.from_numpy(np.asarray(ids, dtype=np.int64))[None]
        exact = self.table.next_base_counts(labels)
        counts = exact + self.table.copy_counts(labels, exact, self.smoothing) if self.follow_copies else exact
        scored = ~np.isnan(np.asarray(base_ll))
        self.scored_bases += int(scored.sum())
        self.covered_bases += int((exact[0].sum(-1).numpy() > 0)[scored].sum())
        mixed, _ = mix_log_likelihood(torch.from_numpy(np.asarray(base_ll, np.float32))[None], labels, counts,
                                      self.switch, self.smoothing)
        out = mixed[0].numpy()
        return np.where(np.isnan(base_ll), np.float32("nan"), out).astype(np.float32)
