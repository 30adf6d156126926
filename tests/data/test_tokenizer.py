"""Tokenizer: fixed ids, vectorised round trip, reverse complement, masks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from biomoe.data.tokenizer import (
    A_ID,
    BOS_ID,
    C_ID,
    EOS_ID,
    G_ID,
    N_ID,
    PAD_ID,
    T_ID,
    UNK_ID,
    NucleotideTokenizer,
)

ALPHABET = "ACGTNRYSWKMBDHV"


def test_fixed_ids_and_vocab() -> None:
    tok = NucleotideTokenizer()
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert [tok.token_to_id(b) for b in ALPHABET] == list(range(4, 19))
    assert (A_ID, C_ID, G_ID, T_ID, N_ID) == (4, 5, 6, 7, 8)
    assert tok.vocab_size == 19
    assert tok.padded_vocab_size % 64 == 0 and tok.padded_vocab_size >= tok.vocab_size
    assert tok.padded_vocab_size == 64


@pytest.mark.parametrize("seed", range(5))
def test_round_trip_random_with_iupac_and_lowercase(seed: int) -> None:
    rng = np.random.default_rng(seed)
    letters = np.array(list(ALPHABET + ALPHABET.lower()))
    seq = "".join(letters[rng.integers(0, len(letters), 1000)])
    tok = NucleotideTokenizer()
    ids = tok.encode(seq)
    assert ids.dtype == np.int64 and ids.shape == (1000,)
    assert tok.decode(ids) == seq.upper()
    assert tok.decode(torch.from_numpy(ids)) == seq.upper()


def test_lowercase_not_folded_is_unk() -> None:
    tok = NucleotideTokenizer(fold_lowercase=False)
    ids = tok.encode("ACgt")
    assert ids.tolist() == [A_ID, C_ID, UNK_ID, UNK_ID]
    assert tok.unambiguous_mask(ids).tolist() == [True, True, False, False]


def test_unknown_characters_are_unk_and_bos_eos() -> None:
    tok = NucleotideTokenizer()
    assert tok.encode("AJ-").tolist() == [A_ID, UNK_ID, UNK_ID]
    assert tok.encode("AC", add_bos=True, add_eos=True).tolist() == [BOS_ID, A_ID, C_ID, EOS_ID]
    assert tok.decode([BOS_ID, A_ID, UNK_ID, EOS_ID, PAD_ID]) == "A?"


def test_reverse_complement_hand_example() -> None:
    tok = NucleotideTokenizer()
    ids = tok.encode("AACGTNRYKMBVDHSW")
    assert tok.decode(tok.reverse_complement(ids)) == "WSDHBVKMRYNACGTT"
    with_specials = np.array([BOS_ID, A_ID, C_ID, PAD_ID])
    assert tok.reverse_complement(with_specials).tolist() == [PAD_ID, G_ID, T_ID, BOS_ID]


def test_reverse_complement_involution_numpy_and_torch() -> None:
    tok = NucleotideTokenizer()
    rng = np.random.default_rng(1)
    ids = rng.integers(0, tok.vocab_size, size=(3, 257))
    rc = tok.reverse_complement(ids)
    assert rc.shape == ids.shape and not np.array_equal(rc, ids)
    np.testing.assert_array_equal(tok.reverse_complement(rc), ids)
    t = torch.from_numpy(ids)
    rct = tok.reverse_complement(t)
    assert isinstance(rct, torch.Tensor)
    np.testing.assert_array_equal(rct.numpy(), rc)
    assert torch.equal(tok.reverse_complement(rct), t)


def test_unambiguous_and_soft_mask() -> None:
    tok = NucleotideTokenizer()
    seq = "ACGTNRacgtn"
    ids = tok.encode(seq)
    expected = [True] * 4 + [False, False] + [True] * 4 + [False]
    assert tok.unambiguous_mask(ids).tolist() == expected
    assert tok.unambiguous_mask(torch.from_numpy(ids)).tolist() == expected
    assert tok.unambiguous_mask(np.array([PAD_ID, BOS_ID, EOS_ID, UNK_ID])).tolist() == [False] * 4
    assert tok.soft_mask(seq).tolist() == [False] * 6 + [True] * 5
