"""Per-base log-likelihoods under a model: the forward pass every scoring command batches.

Inputs are ``[BOS] + bases[:-1]`` exactly as in training, so position t is conditioned on the
bases before it in the same window. Non-ACGT positions get NaN: they are never scored (the
training loss masks them too), and neither is the N padding of a batch. Short windows share rows
as documents of their own (:mod:`biomoe.inference.batching`) and score as they do alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import numpy as np
import torch
from torch import Tensor

from biomoe.data.tokenizer import BOS_ID, NucleotideTokenizer
from biomoe.inference.batching import Window, WindowBatch, batches_for, run_batches
from biomoe.inference.load import InferenceModel
from biomoe.model.documents import DocumentLayout
from biomoe.model.losses import per_position_log_likelihood
from biomoe.model.transformer import MoETransformer

__all__ = ["log_likelihood_of", "run_log_likelihood", "sequence_log_likelihood"]


def log_likelihood_of(model: InferenceModel, labels: Tensor, documents: DocumentLayout | None = None) -> Tensor:
    """log p(base | preceding bases of its row, or of its document in packed rows) in nats, fp32
    ``[rows, length]``, NaN where the base is not A/C/G/T."""
    inputs = torch.cat([torch.full_like(labels[:, :1], BOS_ID), labels[:, :-1]], dim=1)
    if documents is not None:  # every document starts from <bos>, as a row does
        inputs = torch.where(documents.position_ids == 0, BOS_ID, inputs)
    logll = per_position_log_likelihood(model(inputs, documents=documents).logits, labels)
    return torch.where(NucleotideTokenizer.unambiguous_mask(labels), logll, torch.full_like(logll, float("nan")))


def run_log_likelihood(model: InferenceModel | MoETransformer, windows: Iterable[Window],
                       consume: Callable[[WindowBatch, np.ndarray], object], batch_tokens: int | None = None,
                       max_windows: int | None = None, reduce: Callable[[Tensor], Mapping[str, Tensor]] | None = None,
                       progress=None, row_tokens: int | None = None) -> None:
    """Score ``windows`` in batches of up to ``batch_tokens`` tokens (short windows packed into
    rows of up to ``row_tokens``); ``consume(batch, ll)`` gets each batch's per-base scores as
    ``[windows, longest]``, row i being ``batch.windows[i]`` from its first base (or, with
    ``reduce``, what it makes of that on the device, e.g. per-window sums), in input order.
    ``progress`` advances by the bases scored."""
    model = InferenceModel.wrap(model)
    batches = batches_for(windows, model.device, batch_tokens, max_windows, row_tokens)

    def compute(tokens: Tensor, batch: WindowBatch) -> Mapping[str, Tensor]:
        ll = batch.per_window(log_likelihood_of(model, tokens, batch.documents(model.device)), float("nan"))
        return reduce(ll) if reduce is not None else {"ll": ll}

    def finish(batch: WindowBatch, out: dict[str, np.ndarray]) -> None:
        consume(batch, out if reduce is not None else out["ll"])
        if progress is not None:
            progress.update(batch.real_tokens)

    run_batches(batches, model.device, compute, finish)


def sequence_log_likelihood(model: InferenceModel | MoETransformer, sequences: list[str] | list[np.ndarray],
                            tokenizer: NucleotideTokenizer | None = None, batch_size: int | None = None,
                            batch_tokens: int | None = None) -> list[np.ndarray]:
    """Per-base log p(base | preceding bases) in nats for each sequence (fp32 numpy arrays), each
    sequence read from its own start; sequences are batched up to ``batch_tokens`` tokens
    (``batch_size`` caps the sequences per batch)."""
    tokenizer = tokenizer or NucleotideTokenizer()
    ids = [tokenizer.encode(s) if isinstance(s, str) else np.asarray(s, dtype=np.int64) for s in sequences]
    out: list[np.ndarray] = [np.zeros(0, dtype=np.float32)] * len(ids)

    def keep(batch: WindowBatch, ll: np.ndarray) -> None:
        for row, window in enumerate(batch.windows):
            out[window.key] = ll[row, :window.ids.size].copy()

    run_log_likelihood(model, (Window(i, arr) for i, arr in enumerate(ids) if arr.size), keep, batch_tokens,
                       batch_size)
    return out
