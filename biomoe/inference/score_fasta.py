"""Per-base log-likelihoods of FASTA sequences under a model, and a summary per sequence.

Long contigs are scored in consecutive windows (the training length, typically); like in
training, each window starts with a fresh context, so the first bases of a window are predicted
with little context. Scores are natural-log probabilities, NaN at bases that are not A/C/G/T.
A mixer (the repeat expert, :class:`~biomoe.genomics.repeat_expert.RepeatExpert`) may turn the
network's scores of each window into those of a mixture; mixing stays causal within the window.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from biomoe.data.reader import SequenceReader
from biomoe.data.tokenizer import NucleotideTokenizer
from biomoe.inference.scoring import sequence_log_likelihood
from biomoe.model.transformer import MoETransformer

__all__ = ["WindowMixer", "score_genome", "summary_rows"]


class WindowMixer(Protocol):
    """Turns a network's per-base scores of one window into a mixture's (e.g. the repeat expert)."""

    def mix(self, base_ll: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """``base_ll``: per-base log p (nats, NaN where the base is not A/C/G/T) of the token ids
        ``ids`` of one window, scored from the window's start; returns the mixture's, same shape."""
        ...


def score_genome(model: MoETransformer, genome: SequenceReader, window: int = 1024, batch_size: int = 8,
                 repeat: WindowMixer | None = None, progress=None) -> dict[str, np.ndarray]:
    """Per-base log-likelihood (nats) for every contig, window by window; with ``repeat``, of the
    network mixed with that repeat expert. ``progress`` (tqdm-like) advances by the bases scored."""
    tokenizer = NucleotideTokenizer()
    result: dict[str, np.ndarray] = {}
    for info in genome.contigs:
        starts = range(0, info.length, window)
        scores: list[np.ndarray] = []
        for first in range(0, len(starts), batch_size):  # a batch at a time, so progress can show
            batch = starts[first:first + batch_size]
            pieces = [tokenizer.encode(genome.fetch(info.name, s, min(s + window, info.length))) for s in batch]
            batch_scores = sequence_log_likelihood(model, pieces, batch_size=batch_size)
            if repeat is not None:
                batch_scores = [repeat.mix(ll, ids) for ll, ids in zip(batch_scores, pieces)]
            scores.extend(batch_scores)
            if progress is not None:
                progress.update(sum(len(piece) for piece in pieces))
        result[info.name] = np.concatenate(scores) if scores else np.zeros(0, dtype=np.float32)
    return result


def summary_rows(per_base: dict[str, np.ndarray]) -> list[dict[str, object]]:
    """One row per contig: contig, length, scored_bases (A/C/G/T), log_likelihood (nats), bits_per_base."""
    rows = []
    for name, values in per_base.items():
        scored = values[~np.isnan(values)]
        total = float(scored.sum())
        rows.append({"contig": name, "length": int(values.size), "scored_bases": int(scored.size),
                     "log_likelihood": total,
                     "bits_per_base": -total / math.log(2) / scored.size if scored.size else float("nan")})
    return rows
