"""The one load path of inference commands and the batched engine behind score-fasta, embed and
score-variants, checked on the CPU reference path."""

from __future__ import annotations

import re

import threading

import numpy as np
import pytest
import torch

from biomoe.cli.main import main as cli_main
from biomoe.data.sources.registry import open_reader
from biomoe.data.tokenizer import BOS_ID, NucleotideTokenizer
from biomoe.errors import ConfigError
from biomoe.inference.batching import Window, pack_windows, prefetch
from biomoe.inference.load import load_for_inference, load_model
from biomoe.inference.score_fasta import score_genome
from biomoe.inference.scoring import sequence_log_likelihood
from biomoe.model.config import ModelConfig
from biomoe.model.moe.router import TopKRouter
from biomoe.model.transformer import MoETransformer
from conftest import error_line, random_dna, save_checkpoint

TOK = NucleotideTokenizer()


def tiny_config(**overrides) -> ModelConfig:
    fields = dict(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                  ffn_hidden_size=32, init_std=0.3)
    fields.update(overrides)
    return ModelConfig(**fields)


@pytest.fixture
def trained(tmp_path):
    torch.manual_seed(0)
    model = MoETransformer(tiny_config()).eval()
    return model, save_checkpoint(tmp_path / "m.ckpt", model, model.config, data={"seq_length": 64})


def test_the_load_path_gives_the_logits_of_the_weights_it_was_given(trained):
    model, ckpt = trained
    loaded = load_for_inference(ckpt, "cpu", announce=lambda line: None)
    ids = torch.tensor([[BOS_ID, *TOK.encode(random_dna(40))]])
    with torch.no_grad():
        expected = model(ids).logits
    assert loaded.dtype == torch.float32 and loaded.precision == "fp32" and not loaded.module.training
    torch.testing.assert_close(loaded(ids).logits, expected, rtol=0, atol=0)
    torch.testing.assert_close(load_model(ckpt)(ids).logits, expected, rtol=0, atol=0)


def test_runtime_options_are_honoured_and_reported(trained):
    _, ckpt = trained
    said: list[str] = []
    loaded = load_for_inference(ckpt, "cpu", "bf16", {"expert_backend": "loop"}, announce=said.append)
    assert said and said[0].startswith("biomoe kernels on CPU") and "weights=bf16" in said[0]
    assert "experts=loop (configured)" in said[0]
    assert loaded.dtype == torch.bfloat16 and loaded.module.embed.weight.dtype == torch.bfloat16
    routers = [m for m in loaded.module.modules() if isinstance(m, TopKRouter)]
    assert routers and all(r.gate.weight.dtype == torch.float32 for r in routers)  # routing stays fp32
    assert {layer.experts.backend_name for layer in loaded.module.moe_layers()} == {"loop"}
    ids = torch.tensor([[BOS_ID, *TOK.encode(random_dna(30))]])
    assert loaded(ids).logits.dtype == torch.bfloat16


def test_bf16_weights_compute_what_fp32_weights_do_to_bf16_rounding(tmp_path):
    """Every expert on every token (top_k = num_experts), so that no near-tie in routing can send
    a token elsewhere: what is left is rounding."""
    torch.manual_seed(0)
    model = MoETransformer(tiny_config(num_experts=2, top_k=2, init_std=0.05)).eval()
    ckpt = save_checkpoint(tmp_path / "m.ckpt", model, model.config)
    ids = torch.tensor([[BOS_ID, *TOK.encode(random_dna(60))]])
    fp32 = load_for_inference(ckpt, "cpu", announce=lambda line: None)(ids).logits
    bf16 = load_for_inference(ckpt, "cpu", "bf16", announce=lambda line: None)(ids).logits.float()
    assert (bf16 - fp32).abs().max() < 0.02 * fp32.abs().max()  # bf16 keeps ~3 significant digits


def test_a_backend_that_cannot_run_here_is_refused_not_substituted(trained):
    _, ckpt = trained
    with pytest.raises(ConfigError, match="te needs"):
        load_for_inference(ckpt, "cpu", overrides={"attention_backend": "te"}, announce=lambda line: None)


def test_a_recorded_runtime_that_cannot_run_here_falls_back_to_what_can(tmp_path, trained):
    model, _ = trained
    from biomoe.model.config import RuntimeConfig

    ckpt = {"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
            "hyper_parameters": {"config": model.config,
                                 "runtime": RuntimeConfig(attention_backend="te", norm_backend="te")}}
    path = tmp_path / "te.ckpt"
    torch.save(ckpt, path)
    said: list[str] = []
    loaded = load_for_inference(path, "cpu", announce=said.append)
    assert "attention=torch SDPA" in said[0] and loaded.dtype == torch.float32


def test_batched_scoring_equals_window_by_window_scoring(trained, write_fasta):
    model, _ = trained
    genome = open_reader(write_fasta({"a": random_dna(300, seed=1), "b": random_dna(70, seed=2) + "NNNN",
                                      "c": random_dna(5, seed=3)}))
    batched = score_genome(model, genome, window=64, batch_tokens=1 << 12)
    one_by_one = score_genome(model, genome, window=64, batch_tokens=1)
    assert list(batched) == ["a", "b", "c"]
    # Equal up to fp32 rounding (a few ulps: a batch of windows and a single one may take different
    # matmul kernels on some CPUs); a window scored with the wrong context is off by far more.
    for name in batched:
        np.testing.assert_allclose(batched[name], one_by_one[name], rtol=1e-6, atol=1e-6)
    # and each window is scored from its own start, as a sequence on its own
    (first,) = sequence_log_likelihood(model, [genome.fetch("a", 64, 128)])
    np.testing.assert_allclose(batched["a"][64:128], first, rtol=1e-6, atol=1e-6)
    assert np.isnan(batched["b"][-4:]).all() and not np.isnan(batched["b"][:-4]).any()


def test_token_budget_and_row_cap_bound_every_batch():
    windows = [Window(i, np.full(n, 3)) for i, n in enumerate([10, 10, 10, 4, 30, 10, 10])]
    batches = list(pack_windows(windows, batch_tokens=32, max_windows=2))
    assert [w.key for b in batches for w in b.windows] == list(range(7))  # order kept
    for b in batches:
        assert b.tokens.numel() <= 32 or len(b.windows) == 1
        assert len(b.windows) <= 2
        np.testing.assert_array_equal(b.lengths, [w.ids.size for w in b.windows])


def test_read_ahead_hands_over_the_producers_error_and_stops_with_the_consumer():
    def failing():
        yield 1
        raise ValueError("bad record")

    with pytest.raises(ValueError, match="bad record"):
        list(prefetch(failing()))
    produced = []

    def endless():
        i = 0
        while True:
            produced.append(i)
            yield i
            i += 1

    before = threading.active_count()
    stream = prefetch(endless(), depth=2)
    assert next(stream) == 0
    stream.close()
    assert threading.active_count() <= before and len(produced) < 10


def test_score_fasta_runs_in_bf16_on_request_and_says_so(trained, write_fasta, tmp_path, capsys):
    _, ckpt = trained
    fasta = write_fasta({"x": random_dna(200)})
    out = tmp_path / "s"
    assert cli_main(["score-fasta", str(ckpt), str(fasta), "--out", str(out), "--device", "cpu",
                     "--precision", "bf16", "--batch-tokens", "128", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "biomoe kernels on CPU" in captured.out and "weights=bf16" in captured.out
    assert re.search(r"scored 200 bases in [\d.]+ s: [\d.]+ [kM]bp/s ", captured.err), captured.err
    rows = (tmp_path / "s.tsv").read_text().splitlines()
    assert rows[0].startswith("contig\tlength") and rows[1].split("\t")[:3] == ["x", "200", "200"]


def test_a_bad_precision_is_one_line(trained, write_fasta, tmp_path, capsys):
    _, ckpt = trained
    fasta = write_fasta({"x": random_dna(50)})
    assert cli_main(["score-fasta", str(ckpt), str(fasta), "--out", str(tmp_path / "s"), "--device", "cpu",
                     "--precision", "fp12"]) == 2
    assert "--precision: 'fp12' is unknown" in error_line(capsys.readouterr().err)



def test_a_load_selects_the_kernels_once_and_builds_the_model_once(trained, monkeypatch):
    """One descent: kernels chosen once, the model constructed once (on the meta device, filled
    from the file), the file read once."""
    import biomoe.build
    import biomoe.checkpoint.verify
    import biomoe.inference.load

    _, ckpt = trained
    calls: list[str] = []

    def counted(module, name):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, **k: (calls.append(name), real(*a, **k))[1])

    counted(biomoe.inference.load, "select_backends")
    counted(biomoe.build, "select_backends")
    counted(biomoe.checkpoint.verify, "read_checkpoint")
    real_init = MoETransformer.__init__
    monkeypatch.setattr(MoETransformer, "__init__",
                        lambda self, *a, **k: (calls.append("MoETransformer"), real_init(self, *a, **k))[1])
    loaded = load_for_inference(ckpt, "cpu", announce=lambda line: None)
    assert sorted(calls) == ["MoETransformer", "read_checkpoint", "select_backends"]
    assert not loaded.module.embed.weight.is_meta


def test_a_cpu_rate_is_written_in_kbp_a_gpu_rate_in_mbp():
    from biomoe.cli.arguments import base_rate

    assert base_rate(5_483_536, 865.32) == "6.3 kbp/s"
    assert base_rate(13_500_000, 6.1) == "2.21 Mbp/s"


def test_bf16_inference_runs_torch_kernels_whatever_training_recorded():
    """The use commands choose their own kernels (measured: TE's import and first forward cost
    seconds a process); a kernel the command names is kept, and so refused where it cannot run."""
    from biomoe.inference.load import inference_runtime
    from biomoe.model.config import LAYER_BACKEND_FIELDS

    recorded = {name: "te" for name in LAYER_BACKEND_FIELDS} | {"expert_backend": "te_fused"}
    runtime, precision = inference_runtime("cpu", "bf16", recorded, config=tiny_config())
    assert precision == "bf16"
    assert {getattr(runtime, name) for name in LAYER_BACKEND_FIELDS} == {"torch"}
    assert runtime.expert_backend == "grouped"
    from_auto, _ = inference_runtime("cpu", "bf16", {"expert_backend": "auto"}, config=tiny_config())
    assert from_auto.expert_backend == "grouped"  # a training run's auto may have meant quack
    kept, _ = inference_runtime("cpu", "bf16", {"expert_backend": "loop"}, config=tiny_config())
    assert kept.expert_backend == "loop"  # a torch expert backend as recorded
    with pytest.raises(ConfigError, match="te needs"):
        inference_runtime("cpu", "bf16", recorded, overrides={"norm_backend": "te"}, config=tiny_config())
