"""Substitutions scored from the reference window's cached keys and values.

A substitution whose first changed base sits at offset ``o`` of its window changes the label at
``o`` and the inputs from ``o + 1`` on (inputs are the bases shifted right by one). Positions before
``o`` see the same bases with the same labels in both windows, so their log-likelihoods are equal;
position ``o`` is predicted from the same context in both, so its alt log-likelihood is read from
the reference window's own prediction there. The alt window therefore runs only from ``o + 1``,
attending to the reference window's keys and values of positions ``0..o`` (a :class:`KVCache`
continued under a lower-right causal mask). A substitution centred in a window of ``W`` bases costs
``W + W/2`` tokens instead of ``2W``; the alternatives at one site, and every substitution whose
window is the same stretch of genome (a codon's nine SNVs in one window), share one reference
pass, and alt rows of one pass continue from the earliest change among them.

The sums are those of :func:`biomoe.inference.score_variants.score_windows` scoring the two windows
alone: ``logp_ref`` over the reference window, ``logp_alt`` over the alt window, N positions left
out, each in float64; only the order of the floating-point operations inside the network differs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from biomoe.data.tokenizer import BOS_ID, NucleotideTokenizer
from biomoe.inference.batching import default_batch_tokens, run_batches
from biomoe.inference.load import InferenceModel
from biomoe.model.losses import per_position_log_likelihood
from biomoe.model.transformer import KVCache

__all__ = ["Substitution", "continues_from_prefix", "score_substitutions"]

CONTINUED_PRECISIONS = ("fp32", "bf16")
"""Precisions whose forward takes any number of tokens (the FP8/FP4 recipes' GEMMs want multiples
of 16, which an alt window's remainder seldom is): those keep scoring both windows whole."""


@dataclass(frozen=True)
class Substitution:
    """One variant's two windows of equal length (token ids, any integer dtype), differing first at
    ``offset``."""

    key: int
    ref_ids: np.ndarray
    alt_ids: np.ndarray
    offset: int


def continues_from_prefix(model: InferenceModel) -> bool:
    """Whether alt windows may run from the reference window's cache: under a recipe that takes any
    token count, and eager blocks (compiled ones were asked for the shapes of whole windows)."""
    return model.precision in CONTINUED_PRECISIONS and not model.compiled


@dataclass
class _Chunk:
    """Reference windows and the alt windows continuing them, for one forward pair."""

    width: int
    prefix: int  # inputs 0..prefix-1 are the same in every alt row and its reference: the alt pass runs the rest
    ref_keys: list[list[int]]  # per reference row, the items it serves
    alt_keys: list[int]
    alt_ref: np.ndarray  # per alt row, its reference row
    tokens: Tensor  # [references + alts, width] int64 labels (pinned on a CUDA run)


def _chunks(items: Sequence[Substitution], budget: int, max_rows: int | None, pin: bool) -> Iterator[_Chunk]:
    """Items grouped by window length, each reference window once (the alleles at one site, and
    the sites of one codon when they share a window, share its row), cut into chunks of about
    ``budget`` forward tokens: a reference row costs its width, an alt row what it continues."""
    groups: dict[int, dict[bytes, list[Substitution]]] = {}
    for item in items:
        groups.setdefault(item.ref_ids.size, {}).setdefault(item.ref_ids.tobytes(), []).append(item)
    for width, sites in groups.items():
        refs: list[list[Substitution]] = []
        cost = rows = 0
        # by earliest change: a chunk's alt rows all run from its earliest one, so one variant near a
        # contig's end (its window not centred on it) must not make a chunk of centred ones run whole
        for site in sorted(sites.values(), key=lambda site: min(item.offset for item in site)):
            more = width + sum(width - item.offset for item in site)
            if refs and (cost + more > budget or (max_rows is not None and rows + len(site) + 1 > max_rows)):
                yield _chunk(width, refs, pin)
                refs, cost, rows = [], 0, 0
            refs.append(site)
            cost, rows = cost + more, rows + len(site) + 1
        if refs:
            yield _chunk(width, refs, pin)


def _chunk(width: int, refs: list[list[Substitution]], pin: bool) -> _Chunk:
    alts = [item for site in refs for item in site]
    rows = np.stack([site[0].ref_ids for site in refs] + [item.alt_ids for item in alts])
    tokens = torch.from_numpy(rows.astype(np.int64, copy=False))  # items may hold their tokens in one byte each
    return _Chunk(width, min(item.offset for item in alts) + 1, [[item.key for item in site] for site in refs],
                  [item.key for item in alts], np.repeat(np.arange(len(refs)), [len(site) for site in refs]),
                  tokens.pin_memory() if pin else tokens)


def _masked_ll(logits: Tensor, labels: Tensor) -> Tensor:
    """Per-position log p(label) in float64, NaN where the label is not A/C/G/T."""
    ll = per_position_log_likelihood(logits, labels).double()
    return torch.where(NucleotideTokenizer.unambiguous_mask(labels), ll, torch.full_like(ll, float("nan")))


def _compute(model: InferenceModel, tokens: Tensor, chunk: _Chunk) -> dict[str, Tensor]:
    width, prefix, refs = chunk.width, chunk.prefix, len(chunk.ref_keys)
    ref_labels, alt_labels = tokens[:refs], tokens[refs:]
    inputs = torch.cat([torch.full_like(ref_labels[:, :1], BOS_ID), ref_labels[:, :-1]], dim=1)
    cache = KVCache(model.config, refs, width, device=model.device, dtype=model.dtype)
    ref_logits = model(inputs, cache=cache).logits
    ref_ll = _masked_ll(ref_logits, ref_labels)
    which = torch.from_numpy(chunk.alt_ref).to(model.device)
    # position prefix - 1 is predicted from shared inputs: the alt label's log p comes from the
    # reference pass (an alt that changes a later base has the reference label there: adds 0)
    shared = prefix - 1
    llr = _masked_ll(ref_logits[which, shared:shared + 1], alt_labels[:, shared:shared + 1]).nansum(1) \
        - ref_ll[which, shared].nan_to_num(0.0)
    if prefix < width:
        continued = KVCache(model.config, len(chunk.alt_keys), width, device=model.device, dtype=model.dtype)
        for layer in range(model.config.num_layers):
            continued.keys[layer][:, :, :prefix] = cache.keys[layer][which, :, :prefix]
            continued.values[layer][:, :, :prefix] = cache.values[layer][which, :, :prefix]
        continued.length = prefix
        alt_logits = model(alt_labels[:, prefix - 1:width - 1], cache=continued).logits
        llr = llr + _masked_ll(alt_logits, alt_labels[:, prefix:]).nansum(1) - ref_ll[which, prefix:].nansum(1)
    logp_ref = ref_ll.nansum(1)
    return {"logp_ref": logp_ref, "logp_alt": logp_ref[which] + llr}


def score_substitutions(model: InferenceModel, items: Sequence[Substitution],
                        consume: Callable[[int, float, float], object], batch_tokens: int | None = None,
                        max_rows: int | None = None, progress=None) -> None:
    """``consume(key, logp_ref, logp_alt)`` for every item; ``progress`` advances by one per item."""
    budget = batch_tokens or default_batch_tokens(model.device)

    def finish(chunk: _Chunk, out: dict[str, np.ndarray]) -> None:
        for row, key in enumerate(chunk.alt_keys):
            consume(key, float(out["logp_ref"][chunk.alt_ref[row]]), float(out["logp_alt"][row]))
        if progress is not None:
            progress.update(len(chunk.alt_keys))

    chunks = _chunks(items, budget, max_rows, pin=model.device.type == "cuda")
    run_batches(chunks, model.device, lambda tokens, chunk: _compute(model, tokens, chunk), finish)
