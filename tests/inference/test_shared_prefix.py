"""Substitutions scored by continuing the reference window's cache equal the two windows scored whole."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from biomoe.data.tokenizer import NucleotideTokenizer
from biomoe.inference import shared_prefix
from biomoe.inference.load import InferenceModel
from biomoe.inference.scoring import sequence_log_likelihood
from biomoe.inference.shared_prefix import Substitution, continues_from_prefix, score_substitutions
from biomoe.model.config import ModelConfig
from biomoe.model.transformer import MoETransformer

TOKENS = NucleotideTokenizer()


@pytest.fixture(scope="module")
def model() -> InferenceModel:
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                      ffn_hidden_size=32)
    return InferenceModel.wrap(MoETransformer(cfg).eval())


def _cases(rng: np.random.Generator) -> list[tuple[str, str, int]]:
    """(ref window, alt window, first changed offset): SNVs and MNVs at every kind of offset, in windows
    of two lengths, one with N bases, and several alleles at one site."""
    out = []
    for width in (40, 17):
        ref = "".join(rng.choice(list("ACGT"), width))
        if width == 17:
            ref = ref[:5] + "NN" + ref[7:]
        for offset in (0, 1, width // 2, width - 2, width - 1):
            if ref[offset] == "N":
                continue
            for alt_base in [b for b in "ACGT" if b != ref[offset]]:  # three alleles share the site
                out.append((ref, ref[:offset] + alt_base + ref[offset + 1:], offset))
        if width == 40:  # a two-base substitution
            mnv = "".join("A" if b != "A" else "C" for b in ref[20:22])
            out.append((ref, ref[:20] + mnv + ref[22:], 20))
    return out


def _whole(model: InferenceModel, ref: str, alt: str) -> tuple[float, float]:
    ref_ll, alt_ll = sequence_log_likelihood(model, [ref, alt])
    return float(np.nansum(ref_ll.astype(np.float64))), float(np.nansum(alt_ll.astype(np.float64)))


@pytest.mark.parametrize("batch_tokens", [None, 1, 100])
def test_continued_alt_windows_score_as_the_whole_windows(model: InferenceModel, batch_tokens: int | None) -> None:
    cases = _cases(np.random.default_rng(0))
    items = [Substitution(i, TOKENS.encode(r), TOKENS.encode(a), o) for i, (r, a, o) in enumerate(cases)]
    got: dict[int, tuple[float, float]] = {}
    score_substitutions(model, items, lambda key, ref, alt: got.__setitem__(key, (ref, alt)), batch_tokens)
    assert sorted(got) == list(range(len(cases)))
    for i, (ref, alt, _) in enumerate(cases):
        assert got[i] == pytest.approx(_whole(model, ref, alt), abs=2e-4), (i, ref, alt)
    assert any(abs(g[1] - g[0]) > 1e-3 for g in got.values())  # the alleles do change the scores


def test_alleles_at_one_site_share_one_reference_row(model: InferenceModel) -> None:
    cases = _cases(np.random.default_rng(1))
    items = [Substitution(i, TOKENS.encode(r), TOKENS.encode(a), o) for i, (r, a, o) in enumerate(cases)]
    chunks = list(shared_prefix._chunks(items, budget=1 << 20, max_rows=None, pin=False))
    sites = {r for r, _, _ in cases}
    assert sum(len(c.ref_keys) for c in chunks) == len(sites)  # each reference window once, whatever the offsets
    assert sum(len(c.alt_keys) for c in chunks) == len(cases)
    for chunk in chunks:  # every alt row follows its own reference row
        for row, key in enumerate(chunk.alt_keys):
            assert key in chunk.ref_keys[chunk.alt_ref[row]]
    tight = list(shared_prefix._chunks(items, budget=1, max_rows=None, pin=False))
    assert len(tight) == len(sites)  # a budget below one site still scores each site whole


def test_recipes_that_want_whole_tiles_and_compiled_blocks_keep_whole_windows(model: InferenceModel) -> None:
    assert continues_from_prefix(model)
    for precision, continued in (("bf16", True), ("fp32", True), ("fp8-delayed", False), ("mxfp8", False),
                                 ("nvfp4", False)):
        other = InferenceModel(model.module, model.device, model.dtype, precision)
        assert continues_from_prefix(other) is continued
    compiled = InferenceModel(model.module, model.device, model.dtype, "bf16", compiled=True)
    assert not continues_from_prefix(compiled)


def test_windows_off_centre_share_chunks_so_centred_ones_keep_their_short_alt_rows() -> None:
    """A chunk's alt rows all run from its earliest change: the few variants whose windows are not
    centred on them (near a contig's end) are gathered into as few chunks as possible."""
    rng = np.random.default_rng(1)
    width, items = 64, []
    for key in range(44):
        ref = "".join(rng.choice(list("ACGT"), width))
        offset = 2 if key % 11 == 5 else width // 2  # four off-centre variants among forty centred
        alt = ref[:offset] + "ACGT"[("ACGT".index(ref[offset]) + 1) % 4] + ref[offset + 1:]
        items.append(Substitution(key, TOKENS.encode(ref), TOKENS.encode(alt), offset))
    chunks = list(shared_prefix._chunks(items, budget=6 * (width + width // 2), max_rows=None, pin=False))
    assert sorted(key for chunk in chunks for key in chunk.alt_keys) == list(range(44))
    assert sum(chunk.prefix < width // 2 for chunk in chunks) == 1


def test_substitutions_are_the_windows_token_for_token_with_each_reference_encoded_once() -> None:
    """The variants' windows become substitutions exactly as encoding both windows whole would make
    them (a change of case only, an indel or an unchanged allele is not one); windows that are one
    stretch of genome share one reference array."""
    from biomoe.inference.score_variants import _substitutions

    rng = np.random.default_rng(3)
    ref = "".join(rng.choice(list("ACGTN"), 64, p=[0.24, 0.24, 0.24, 0.24, 0.04]))
    soft = ref[:20] + ref[20:40].lower() + ref[40:]
    prepared = [(0, ref, ref[:31] + ("A" if ref[31] != "A" else "C") + ref[32:]),  # SNV
                (0, ref, ref[:31] + ("G" if ref[31] != "G" else "T") + ref[32:]),  # another allele, same window
                (0, ref, ref[:10] + "TT" + ref[12:]),  # MNV (or less, where the reference already has T)
                (0, ref, ref[:30] + ref[31:]),  # deletion: not a substitution
                (0, ref, ref),  # the reference allele
                (0, soft, ref),  # a change of case only: the same tokens
                (0, soft, soft[:25] + "N" + soft[26:]),  # a change to N inside soft-masked bases
                (5, ref[5:] + "A" * 5, ref[5:35] + "C" + ref[36:] + "A" * 5)]
    items, rest = _substitutions(TOKENS, prepared)
    expected_items, expected_rest = [], []
    for j, (_, r, a) in enumerate(prepared):
        r_ids, a_ids = TOKENS.encode(r), TOKENS.encode(a)
        changed = np.flatnonzero(r_ids != a_ids) if r_ids.size == a_ids.size else np.empty(0, dtype=int)
        if changed.size:
            expected_items.append((j, r_ids, a_ids, int(changed[0])))
        else:
            expected_rest.append(j)
    assert rest == expected_rest and 3 in rest and 4 in rest and 5 in rest
    assert len(items) == len(expected_items)
    for item, (key, r_ids, a_ids, offset) in zip(items, expected_items):
        assert item.key == key and item.offset == offset
        assert np.array_equal(item.ref_ids.astype(np.int64), r_ids)
        assert np.array_equal(item.alt_ids.astype(np.int64), a_ids)
    assert items[0].ref_ids is items[1].ref_ids  # one reference window, encoded once
