"""CUDA-graph decoding on a real GPU: the replayed step gives the eager static-cache step's logits
(bf16), through refills, with no host sync between bases; samples agree wherever the logits are
bitwise equal; greedy decoding gives the same tokens both ways; a replayed step is one graph launch,
with no kernel launched by the host.

    python -m pytest -q tests/gpu/test_generate_graph.py
"""

from __future__ import annotations


import numpy as np
import pytest
import torch

from biomoe.backends.te.availability import te_installed
from biomoe.data.tokenizer import A_ID, N_ID, NucleotideTokenizer
from biomoe.inference.decode_kernels import decode_graph_supported
from biomoe.inference.generate import generate
from biomoe.inference.sampling import SampleNoise, SamplingSettings
from biomoe.inference.static_decoder import StaticDecoder
from biomoe.inference.load import InferenceModel, prepare_model
from biomoe.model.config import ModelConfig
from biomoe.model.transformer import MoETransformer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
DEV = torch.device("cuda")
TOK = NucleotideTokenizer()
CFG = dict(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
           ffn_hidden_size=64, init_std=0.3)  # sizes multiples of 8: torch._grouped_mm's bf16 alignment
TORCH_KERNELS = {"expert_backend": "grouped", "norm_backend": "torch", "attention_backend": "torch",
                 "router_backend": "torch", "dispatch_backend": "torch"}


def _model(overrides: dict | None, **config) -> InferenceModel:
    """A random model built for the GPU as ``biomoe generate`` builds a checkpoint (bf16 weights,
    fp32 routers; TE kernels where TE is usable unless ``overrides`` say torch)."""
    torch.manual_seed(0)
    module = MoETransformer(ModelConfig(**{**CFG, **config}))
    return prepare_model(module.config, module.state_dict(), DEV, overrides=overrides, announce=lambda line: None)


class _Recording(StaticDecoder):
    """Keeps the logits every base was sampled from (after each step and each refill)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[torch.Tensor] = []

    def step(self) -> None:
        super().step()
        self.seen.append(self.logits.clone())

    def refill(self, tail) -> None:
        super().refill(tail)
        self.seen.append(self.logits.clone())


KERNELS = [pytest.param(TORCH_KERNELS, id="torch"),
           pytest.param(None, id="as-built", marks=pytest.mark.skipif(not te_installed(), reason="needs TE"))]


@pytest.mark.parametrize("overrides", KERNELS)
def test_graph_replays_give_the_eager_steps_logits_through_refills(overrides):
    model = _model(overrides)
    ok, reason = decode_graph_supported(model)
    assert ok, reason
    prompt = TOK.encode("ACGTTGCAACGGT")
    settings = SamplingSettings(temperature=1.0, top_p=0.95)
    runs = {}
    for use_graph in (False, True):  # max_tokens 24, length 60: two refills on the way
        decoder = _Recording(model, batch_size=3, length=60, max_tokens=24, settings=settings, use_graph=use_graph)
        samples = decoder.run(prompt, SampleNoise(4, range(3), DEV))
        assert decoder.graphed == use_graph
        runs[use_graph] = (samples, decoder.seen)
    (eager_samples, eager_logits), (graph_samples, graph_logits) = runs[False], runs[True]
    assert len(eager_logits) == len(graph_logits) == 60
    bitwise = True
    for t, (e, g) in enumerate(zip(eager_logits, graph_logits)):
        torch.testing.assert_close(g, e, rtol=2e-2, atol=5e-2, msg=lambda m, t=t: f"base {t}: {m}")
        bitwise = bitwise and torch.equal(g, e)
    if bitwise:
        for x, y in zip(eager_samples, graph_samples):
            np.testing.assert_array_equal(x, y)
    print(f"\ngraph vs eager logits over 60 bases: {'bitwise equal' if bitwise else 'close, not bitwise'}")
    for sample in graph_samples:
        assert set(sample.tolist()) <= set(range(A_ID, N_ID))


def test_replayed_steps_never_synchronise_with_the_host():
    model = _model(TORCH_KERNELS)
    decoder = StaticDecoder(model, batch_size=4, length=2000, max_tokens=2048, use_graph=True)
    decoder.start(SampleNoise(0, range(4), DEV))
    decoder.refill(torch.full((4, 5), A_ID, device=DEV))
    decoder.step()  # captures the graph
    assert decoder.graphed
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(1100):  # crosses a noise block (1024 uniforms per sample): its copy is asynchronous
            decoder.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert int(decoder.cache.position) == decoder.filled == 6 + 1101


def test_generate_replays_a_graph_and_decodes_greedily_as_eager_decoding_does(monkeypatch):
    """Greedy decoding (temperature 0) leaves no room for chance: the graph replays must give the
    eager static-cache decoding's tokens, base for base, through refills (context 64, 300 bases)."""
    model = _model(TORCH_KERNELS)
    graphed: list[bool] = []
    run = StaticDecoder.run

    def recording_run(self, *args, **kwargs):
        out = run(self, *args, **kwargs)
        graphed.append(self.graphed)
        return out

    monkeypatch.setattr(StaticDecoder, "run", recording_run)
    greedy = SamplingSettings(temperature=0.0)
    for text in ("ACGTTGCAACGGT", "GGGATTACAGATTACA", "TTTTCCGAAC"):
        prompt = TOK.encode(text)
        graph = generate(model, prompt, 300, num_samples=2, settings=greedy, context=64)
        eager = generate(model, prompt, 300, num_samples=2, settings=greedy, context=64, decode="static")
        assert all(len(x) == 300 and set(x.tolist()) <= set(range(A_ID, N_ID)) for x in graph)
        for x, y in zip(graph, eager):
            np.testing.assert_array_equal(x, y, err_msg=f"prompt {text}")
        assert len(set(graph[0].tolist())) > 1  # a model stuck on one base would hide a broken step
    assert graphed == [True, False] * 3


def test_generate_samples_as_eager_decoding_does_with_the_same_seed():
    model = _model(TORCH_KERNELS)
    settings = SamplingSettings(temperature=1.0)
    graph = generate(model, None, 300, num_samples=8, settings=settings, seed=1, context=64)
    eager = generate(model, None, 300, num_samples=8, settings=settings, seed=1, context=64, decode="static")
    same = sum(int((x == y).all()) for x, y in zip(graph, eager))
    assert same >= 6, f"{same}/8 samples identical"  # a near-tie of bf16 logits may flip one draw


@pytest.mark.parametrize("batch", [1, 64])
def test_a_replayed_step_is_one_graph_launch_where_an_eager_step_launches_every_kernel(batch):
    """dna-small's shape (random weights): once captured, each base costs the host one graph launch
    and no kernel launch of its own, where an eager static-cache step launches every kernel of the
    forward and the sampler (the work the graph saves; ``python -m bench --inference`` times
    ``generate`` as users run it)."""
    model = _model(None if te_installed() else TORCH_KERNELS, hidden_size=1024, num_layers=8, num_heads=16,
                   num_kv_heads=4, num_experts=8, top_k=2, ffn_hidden_size=2816)
    steps = 32
    counted = {}
    for use_graph in (False, True):
        decoder = StaticDecoder(model, batch_size=batch, length=steps + 8, max_tokens=1024, use_graph=use_graph)
        decoder.start(SampleNoise(0, range(batch), DEV))
        decoder.refill(torch.full((batch, 5), A_ID, device=DEV))
        decoder.step()  # eager: a warm-up step; graphed: the capture, outside what is counted
        assert decoder.graphed == use_graph
        torch.cuda.synchronize()
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(steps):
                decoder.step()
            torch.cuda.synchronize()
        names = [e.name for e in prof.events()]
        counted[use_graph] = (sum("LaunchKernel" in n for n in names), sum("GraphLaunch" in n for n in names))
    (eager_kernels, eager_graphs), (graph_kernels, graph_graphs) = counted[False], counted[True]
    assert eager_graphs == 0 and eager_kernels >= 10 * steps, counted  # 8 layers: dozens of kernels a step
    assert graph_graphs >= steps and graph_kernels < steps, counted
