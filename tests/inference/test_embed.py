"""Embeddings: shapes, index arrays, and values equal to the model's hidden states computed directly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from biomoe.data.tokenizer import BOS_ID, NucleotideTokenizer
from biomoe.inference.embed import hidden_states, parse_layer
from biomoe.model.transformer import MoETransformer, rotary_tables
from biomoe.cli.main import main as cli_main
from conftest import random_dna, save_checkpoint

TOK = NucleotideTokenizer()
WINDOW = 64


@pytest.fixture
def model(tiny_config) -> MoETransformer:
    torch.manual_seed(0)
    cfg = tiny_config(num_layers=3, init_std=0.3)
    return MoETransformer(cfg).eval()


@pytest.fixture
def genome() -> dict[str, str]:
    two = random_dna(100, seed=2)
    return {"one": random_dna(150, seed=1), "two": two[:40] + "N" * 20 + two[60:]}


@pytest.fixture
def files(tmp_path, model, genome, write_fasta):
    ckpt = save_checkpoint(tmp_path / "tiny.ckpt", model, model.config, data={"seq_length": WINDOW})
    return ckpt, write_fasta(genome)


@torch.no_grad()
def direct_states(model: MoETransformer, seq: str, layer: int | None) -> np.ndarray:
    """Per-base hidden states, window by window, computed without biomoe.inference.embed."""
    out = []
    for start in range(0, len(seq), WINDOW):
        ids = torch.tensor([[BOS_ID, *TOK.encode(seq[start:start + WINDOW])]])
        if layer is None:
            states = model(ids).hidden
        else:
            x = model.embed(ids)
            cos, sin = rotary_tables(ids.shape[1], model.config.head_dim, model.config.rope_theta, ids.device)
            for block in model.blocks[:layer + 1]:
                x, _, _ = block(x, cos, sin)
            states = x
        out.append(states[0, 1:].numpy())
    return np.concatenate(out)


def test_hidden_states_of_a_block_stop_there_and_match_running_the_blocks(model):
    ids = torch.tensor([[BOS_ID, *TOK.encode(random_dna(30))]])
    seq = TOK.decode(ids[0, 1:])
    for layer in (0, 2):
        np.testing.assert_allclose(hidden_states(model, ids, layer)[0, 1:].numpy(),
                                   direct_states(model, seq, layer), rtol=1e-5, atol=1e-6)
    assert parse_layer("final", 3) is None and parse_layer(-1, 3) == 2
    with pytest.raises(ValueError, match="outside"):
        parse_layer("3", 3)


@pytest.mark.parametrize("layer", ["final", "1"])
def test_per_position_embeddings_equal_the_models_hidden_states(files, model, genome, tmp_path, layer):
    ckpt, fasta = files
    out = tmp_path / "emb.npz"
    assert cli_main(["embed", str(ckpt), str(fasta), "--out", str(out), "--pool", "position",
                     "--layer", layer, "--batch-size", "2"]) == 0
    data = np.load(out)
    assert data["embeddings"].shape == (250, 32) and data["embeddings"].dtype == np.float32
    assert list(data["contig_names"]) == ["one", "two"] and str(data["layer"]) == ("final" if layer == "final" else "1")
    np.testing.assert_array_equal(data["contig"], [0] * 150 + [1] * 100)
    np.testing.assert_array_equal(data["position"], np.r_[np.arange(150), np.arange(100)])
    expected = np.concatenate([direct_states(model, genome[name], None if layer == "final" else 1)
                               for name in ("one", "two")])
    # Equal up to fp32 rounding: the short last windows share a row, where the attention kernel
    # blocks the tokens differently than for a window alone (a few ulps, grown over the blocks).
    scale = np.abs(expected).max()
    np.testing.assert_allclose(data["embeddings"], expected, rtol=1e-5, atol=1e-6 * scale)


def test_pooled_rows_are_means_over_acgt_bases(files, model, genome, tmp_path):
    ckpt, fasta = files
    per_base = {name: direct_states(model, seq, None) for name, seq in genome.items()}
    acgt = {name: np.array([c in "ACGT" for c in seq]) for name, seq in genome.items()}

    assert cli_main(["embed", str(ckpt), str(fasta), "--out", str(tmp_path / "mean.npz"), "--pool", "mean"]) == 0
    mean = np.load(tmp_path / "mean.npz")
    assert mean["embeddings"].shape == (2, 32)
    np.testing.assert_array_equal(mean["bases"], [150, 80])
    for row, name in enumerate(("one", "two")):
        np.testing.assert_allclose(mean["embeddings"][row], per_base[name][acgt[name]].mean(0), rtol=1e-5, atol=1e-6)

    # 30-base bins do not line up with the 64-base model windows: bins span two windows.
    assert cli_main(["embed", str(ckpt), str(fasta), "--out", str(tmp_path / "bins.npz"), "--pool", "window",
                     "--pool-size", "30", "--dtype", "float16"]) == 0
    bins = np.load(tmp_path / "bins.npz")
    assert bins["embeddings"].shape == (5 + 4, 32) and bins["embeddings"].dtype == np.float16
    np.testing.assert_array_equal(bins["position"], [0, 30, 60, 90, 120, 0, 30, 60, 90])
    np.testing.assert_array_equal(bins["length"], [30] * 5 + [30, 30, 30, 10])
    np.testing.assert_array_equal(bins["bases"], [30] * 5 + [30, 10, 30, 10])
    for row, (c, start, length) in enumerate(zip(bins["contig"], bins["position"], bins["length"])):
        name = ("one", "two")[c]
        keep = acgt[name][start:start + length]
        expected = per_base[name][start:start + length][keep].mean(0)
        np.testing.assert_allclose(bins["embeddings"][row].astype(np.float32), expected, rtol=2e-3, atol=2e-3)


def test_embed_errors_are_one_line(files, tmp_path, capsys):
    ckpt, fasta = files
    for extra, message in [(["--out", str(tmp_path / "x.npy")], ".npz"),
                           (["--out", str(tmp_path / "x.npz"), "--layer", "7"], "--layer"),
                           (["--out", str(ckpt)], "input")]:
        assert cli_main(["embed", str(ckpt), str(fasta), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("biomoe: error:") and message in err and "\n" not in err
    assert not list(tmp_path.glob(".*.tmp")) and not list(tmp_path.glob(".*rows.npy"))  # no scratch left
