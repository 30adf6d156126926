"""score-fasta and embed pack short records into shared rows, and each record still gets the
per-base scores and embeddings it gets when run alone (CPU reference path, fp32)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from biomoe.data.sources.registry import open_reader
from biomoe.data.tokenizer import BOS_ID, N_ID, NucleotideTokenizer
from biomoe.inference.batching import Window, genome_windows, pack_windows
from biomoe.inference.embed import EmbeddingLayout, embed_genome
from biomoe.inference.score_fasta import score_genome
from biomoe.inference.scoring import run_log_likelihood, sequence_log_likelihood
from biomoe.model.transformer import MoETransformer
from conftest import random_dna

TOK = NucleotideTokenizer()
WINDOW = 64
LENGTHS = [150, 7, 33, 1, 60, 64, 12, 41, 25, 3, 90]  # short records, and long ones with short tails


@pytest.fixture(scope="module")
def model(tiny_config) -> MoETransformer:
    torch.manual_seed(0)
    cfg = tiny_config(init_std=0.3)
    return MoETransformer(cfg).eval()


@pytest.fixture
def genome(write_fasta):
    records = {f"r{i}": random_dna(n, seed=i) for i, n in enumerate(LENGTHS)}
    records["r2"] = records["r2"][:10] + "NN" + records["r2"][12:]
    return open_reader(write_fasta(records))


def test_short_windows_share_rows_as_documents_of_their_own(genome):
    windows = list(genome_windows(genome, WINDOW))
    (batch,) = pack_windows(windows, batch_tokens=1 << 14, row_tokens=WINDOW)
    rows, width = batch.tokens.shape
    assert width == WINDOW and rows < len(windows)  # packed: fewer rows than windows
    assert [w.key for w in batch.windows] == [w.key for w in windows]  # input order kept
    positions = batch.position_ids.numpy()
    tokens = batch.tokens.numpy()
    covered = np.zeros_like(tokens, dtype=bool)
    for window, row, offset in zip(batch.windows, batch.rows, batch.offsets):
        span = slice(offset, offset + window.ids.size)
        np.testing.assert_array_equal(tokens[row, span], window.ids)
        np.testing.assert_array_equal(positions[row, span], np.arange(window.ids.size))
        assert not covered[row, span].any()
        covered[row, span] = True
    assert (tokens[~covered] == N_ID).all()  # the rest is padding, and a document of its own
    for row in range(rows):
        pad = np.flatnonzero(~covered[row])
        if pad.size:
            assert pad[-1] == width - 1 and np.array_equal(positions[row, pad], np.arange(pad.size))
    # the host worked out the documents' offsets for the CUDA kernels
    starts = np.flatnonzero(positions.reshape(-1) == 0)
    np.testing.assert_array_equal(batch.cu_seqlens.numpy(), np.append(starts, tokens.size))


def test_windows_that_fill_their_rows_stay_plain_causal_rows():
    windows = [Window(i, np.full(WINDOW, 5)) for i in range(3)] + [Window(3, np.full(20, 5))]
    (batch,) = pack_windows(windows, batch_tokens=1 << 12, row_tokens=WINDOW)
    assert batch.tokens.shape == (4, WINDOW) and batch.position_ids is None and batch.gather is None


def test_first_fit_budget_window_cap_and_lead_token():
    windows = [Window(i, np.full(n, 5 + i % 4)) for i, n in enumerate([30, 50, 10, 12, 40, 8])]
    (one,) = pack_windows(windows, batch_tokens=1 << 12, row_tokens=64)
    assert list(one.rows) == [0, 1, 0, 0, 2, 0]  # each to the first row with room
    assert list(one.offsets) == [0, 0, 30, 40, 0, 52]
    several = list(pack_windows(windows, batch_tokens=128, row_tokens=64))
    assert all(b.tokens.numel() <= 128 for b in several) and len(several) > 1
    assert [w.key for b in several for w in b.windows] == list(range(6))
    assert all(len(b.windows) <= 2 for b in pack_windows(windows, batch_tokens=1 << 12, max_windows=2))
    (led,) = pack_windows(windows[:3], batch_tokens=1 << 12, row_tokens=65, lead=BOS_ID)
    for window, row, offset in zip(led.windows, led.rows, led.offsets):
        assert led.tokens[row, offset - 1] == BOS_ID and led.position_ids[row, offset - 1] == 0
        np.testing.assert_array_equal(led.tokens[row, offset:offset + window.ids.size].numpy(), window.ids)


def test_packed_scores_equal_each_record_scored_alone(model, genome):
    packed = score_genome(model, genome, window=WINDOW, batch_tokens=1 << 12)
    alone = score_genome(model, genome, window=WINDOW, batch_tokens=1)  # one window per forward pass
    for name in alone:
        np.testing.assert_allclose(packed[name], alone[name], rtol=1e-5, atol=1e-5)
        assert np.isnan(packed[name]).sum() == (2 if name == "r2" else 0)
    # and as a sequence on its own, from its start
    names = ["r1", "r7", "r9"]
    records = [genome.fetch(name, 0, genome.contig(name).length) for name in names]
    for name, seq in zip(names, sequence_log_likelihood(model, records)):
        np.testing.assert_allclose(packed[name], seq, rtol=1e-5, atol=1e-5)


def test_per_window_scores_past_a_window_end_are_nan(model):
    windows = [Window(i, TOK.encode(random_dna(n, seed=n))) for i, n in enumerate([20, 9, 30])]
    seen = []

    def keep(batch, ll):
        assert batch.position_ids is not None  # packed
        for i, window in enumerate(batch.windows):
            assert not np.isnan(ll[i, :window.ids.size]).any() and np.isnan(ll[i, window.ids.size:]).all()
            seen.append(window.key)

    run_log_likelihood(model, windows, keep, batch_tokens=1 << 12, row_tokens=64)
    assert seen == [0, 1, 2]


@pytest.mark.parametrize("pool, pool_size", [("position", 1), ("mean", 1), ("window", 20)])
def test_packed_embeddings_equal_each_record_embedded_alone(model, genome, pool, pool_size):
    names = [info.name for info in genome.contigs]
    layout = EmbeddingLayout(names, [info.length for info in genome.contigs], pool, pool_size)
    rows = int(layout.first_rows()[-1])
    results = []
    for batch_tokens in (1 << 12, 1):  # packed, then one window per forward pass
        out = np.zeros((rows, model.config.hidden_size), dtype=np.float32)
        bases = embed_genome(model, genome, out, layout, layer=None, window=WINDOW, batch_tokens=batch_tokens)
        results.append((out, bases))
    (packed, packed_bases), (alone, alone_bases) = results
    np.testing.assert_array_equal(packed_bases, alone_bases)
    np.testing.assert_allclose(packed, alone, rtol=1e-5, atol=1e-5)
