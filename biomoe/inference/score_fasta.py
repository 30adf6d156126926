"""Per-base log-likelihoods of FASTA sequences under a model, and a summary per sequence.

Long contigs are scored in consecutive windows (the training length, typically); like in
training, each window starts with a fresh context, so the first bases of a window are predicted
with little context. Contigs shorter than a window, and the last pieces of long ones, share rows
of a window's length (each read from its own start, as if alone), so many short records cost
their bases rather than a padded window each. Scores are natural-log probabilities, NaN at bases that are not A/C/G/T.
A mixer (the repeat expert, :class:`~biomoe.genomics.repeat_expert.RepeatExpert`) may turn the
network's scores of each window into those of a mixture; mixing stays causal within the window.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from biomoe.data.sources.reader import SequenceReader
from biomoe.inference.batching import WindowBatch, genome_windows
from biomoe.inference.load import InferenceModel
from biomoe.inference.scoring import run_log_likelihood
from biomoe.model.transformer import MoETransformer

__all__ = ["WindowMixer", "score_genome", "summary_rows"]


class WindowMixer(Protocol):
    """Turns a network's per-base scores of one window into a mixture's (e.g. the repeat expert)."""

    def mix(self, base_ll: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """``base_ll``: per-base log p (nats, NaN where the base is not A/C/G/T) of the token ids
        ``ids`` of one window, scored from the window's start; returns the mixture's, same shape."""
        ...


def score_genome(model: InferenceModel | MoETransformer, genome: SequenceReader, window: int = 1024,
                 batch_size: int | None = None, repeat: WindowMixer | None = None, progress=None,
                 batch_tokens: int | None = None) -> dict[str, np.ndarray]:
    """Per-base log-likelihood (nats) for every contig, window by window; with ``repeat``, of the
    network mixed with that repeat expert. Windows of all contigs (and files) share forward passes
    of up to ``batch_tokens`` tokens, short ones packed into rows of ``window`` tokens
    (``batch_size`` caps the windows per pass); ``progress`` (tqdm-like) advances by the bases scored."""
    result = {info.name: np.full(info.length, np.nan, dtype=np.float32) for info in genome.contigs}

    def place(batch: WindowBatch, ll: np.ndarray) -> None:
        for row, window_ in enumerate(batch.windows):
            name, start = window_.key
            scores = ll[row, :window_.ids.size]
            if repeat is not None:
                scores = repeat.mix(scores, window_.ids)
            result[name][start:start + window_.ids.size] = scores

    run_log_likelihood(model, genome_windows(genome, window), place, batch_tokens, batch_size, progress=progress,
                       row_tokens=window)
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
