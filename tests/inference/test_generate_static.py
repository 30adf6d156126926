"""Static-cache decoding on the CPU (eager; the GPU replays the same step as a CUDA graph):
same logits as the growing KVCache step by step and across a refill, seeds that repeat whatever
the batching, only bases emitted, and the graph-safe kernel swap undone afterwards."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from biomoe.data.tokenizer import A_ID, BOS_ID, N_ID, T_ID, NucleotideTokenizer
from biomoe.inference.decode_kernels import AllExpertsBackend, decode_graph_supported, decode_kernels
from biomoe.inference.generate import generate
from biomoe.inference.sampling import SamplingSettings
from biomoe.inference.static_decoder import StaticDecoder
from biomoe.model.backends import LayerBackends
from biomoe.model.moe import TopKRouter
from biomoe.model.moe.experts import LoopBackend
from biomoe.model.transformer import KVCache, MoETransformer, StaticKVCache
from helpers.special_tokens import favour_special_tokens

TOK = NucleotideTokenizer()


@pytest.fixture
def model(tiny_config) -> MoETransformer:
    torch.manual_seed(0)
    return MoETransformer(tiny_config(init_std=0.3)).eval()  # large init: outputs depend visibly on context


def _bases(b: int, n: int, seed: int) -> torch.Tensor:
    return torch.randint(A_ID, T_ID + 1, (b, n), generator=torch.Generator().manual_seed(seed))


def _with_bos(tail: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.full((tail.shape[0], 1), BOS_ID), tail], dim=1)


@pytest.mark.parametrize("experts", ["auto", "all_experts"])
@torch.no_grad()
def test_static_cache_logits_equal_the_dynamic_cache_step_by_step_and_across_a_refill(model, experts):
    cfg, b = model.config, 3
    static = StaticKVCache(cfg, b, 16)  # one buffer for the whole run; the refill reuses it
    first, second = _with_bos(_bases(b, 5, 1)), _with_bos(_bases(b, 7, 2))
    steps = _bases(b, 18, 3)
    for prefill, feed in ((first, steps[:, :10]), (second, steps[:, 10:])):  # 6 + 10, 8 + 8: the buffer full
        dynamic = KVCache(cfg, b, 16)
        static.reset()
        torch.testing.assert_close(model(prefill, cache=static).logits, model(prefill, cache=dynamic).logits)
        for t in range(feed.shape[1]):
            with decode_kernels(model, experts=experts):
                got = model(feed[:, t:t + 1], cache=static).logits
            want = model(feed[:, t:t + 1], cache=dynamic).logits
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        assert int(static.position) == dynamic.length


@torch.no_grad()
def test_several_tokens_into_a_filled_static_cache_equal_the_full_forward(model):
    ids = _with_bos(_bases(2, 20, 4))
    cache = StaticKVCache(model.config, 2, 32)
    pieces = [model(ids[:, :6], cache=cache).logits, model(ids[:, 6:15], cache=cache).logits,
              model(ids[:, 15:16], cache=cache).logits, model(ids[:, 16:], cache=cache).logits]
    torch.testing.assert_close(torch.cat(pieces, dim=1), model(ids).logits, rtol=1e-4, atol=1e-5)
    assert int(cache.position) == 21 and not cache.empty


@pytest.mark.parametrize("context", [None, 16])  # 16: the samples outgrow the context and refill
def test_static_decoding_samples_what_the_dynamic_cache_samples(model, context):
    prompt = TOK.encode("ACGTTGCAAC")
    settings = SamplingSettings(temperature=1.0, top_p=0.95)
    dynamic = generate(model, prompt, 35, num_samples=3, settings=settings, seed=2, context=context)
    static = generate(model, prompt, 35, num_samples=3, settings=settings, seed=2, context=context, decode="static")
    for x, y in zip(dynamic, static):
        np.testing.assert_array_equal(x, y)


def test_static_decoding_same_seed_same_samples_whatever_the_batching(model):
    prompt = TOK.encode("ACGTTGCA")
    settings = SamplingSettings(temperature=1.0, top_k=3)
    run = dict(settings=settings, context=20, decode="static")
    a = generate(model, prompt, 30, num_samples=5, seed=7, batch_size=2, **run)  # decoder reused, then a batch of 1
    b = generate(model, prompt, 30, num_samples=3, seed=7, batch_size=3, **run)
    again = generate(model, prompt, 30, num_samples=3, seed=7, **run)
    other = generate(model, prompt, 30, num_samples=3, seed=8, batch_size=3, **run)
    for x, y, z in zip(a, b, again):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(y, z)
    assert any((x != y).any() for x, y in zip(b, other))
    assert any((a[0] != other).any() for other in a[1:])


def test_static_decoding_emits_only_bases_even_when_specials_are_likeliest(model):
    favour_special_tokens(model)
    samples = generate(model, None, 200, num_samples=3, settings=SamplingSettings(temperature=1.5), seed=1,
                       context=32, decode="static")
    emitted = set(np.concatenate(samples).tolist())
    assert emitted <= {A_ID, A_ID + 1, A_ID + 2, T_ID} and len(emitted) == 4
    with_n = generate(model, None, 200, num_samples=2, settings=SamplingSettings(allow_n=True), seed=1,
                      decode="static")
    assert set(np.concatenate(with_n).tolist()) <= {A_ID, A_ID + 1, A_ID + 2, T_ID, N_ID}
    assert N_ID in np.concatenate(with_n)


def test_the_decoder_keeps_its_buffers_and_counts_on_the_host(model):
    decoder = StaticDecoder(model, batch_size=2, length=30, max_tokens=12)
    buffers = [decoder.cache.position, decoder.token, decoder.logits, decoder.out, *decoder.cache.keys]
    pointers = [t.data_ptr() for t in buffers]
    from biomoe.inference.sampling import SampleNoise  # the per-sample streams generate() uses

    out = decoder.run(TOK.encode("ACGT"), SampleNoise(0, range(2), torch.device("cpu")))
    assert [t.data_ptr() for t in buffers] == pointers  # refills wrote into the same tensors
    assert decoder.filled == int(decoder.cache.position) <= 12 and not decoder.graphed
    assert len(out) == 2 and all(len(x) == 30 for x in out)


class _NotOnDecode(nn.RMSNorm):
    """Stands in for a TE norm: its own forward must not run in a decode step."""

    def forward(self, x):
        raise AssertionError("the norm's own forward ran in a decode step")


class _RouterNotOnDecode(TopKRouter):
    def forward(self, hidden):
        raise AssertionError("the router's own forward ran in a decode step")


@torch.no_grad()
def test_decode_kernels_swap_in_torch_kernels_on_the_same_weights_and_undo_it(model):
    swapped = MoETransformer(model.config, LayerBackends(norm=_NotOnDecode, router=_RouterNotOnDecode,
                                                         experts="loop")).eval()
    swapped.load_state_dict(model.state_dict())
    ids = _with_bos(_bases(2, 9, 5))
    with decode_kernels(swapped):
        got = swapped(ids).logits
        assert all(m.experts.backend.name == "grouped" for m in swapped.moe_layers())
    torch.testing.assert_close(got, model(ids).logits, rtol=1e-4, atol=1e-5)
    assert all(m.experts.backend.name == "loop" for m in swapped.moe_layers())
    with pytest.raises(AssertionError, match="own forward"):
        swapped(ids)  # restored


def test_all_experts_backend_equals_the_per_expert_loop():
    # float64: outputs reach ~170 here, where fp32 rounding alone differs by ~3e-5 between two
    # summation orders (and by how much depends on the CPU's kernels); in float64 the two
    # computations must agree to ~1e-13.
    torch.manual_seed(1)
    rows, gate_up, down = (torch.randn(9, 16, dtype=torch.float64), torch.randn(4, 24, 16, dtype=torch.float64),
                           torch.randn(4, 16, 12, dtype=torch.float64))
    counts = torch.tensor([3, 0, 4, 2])  # an expert without rows too
    want = LoopBackend()(rows, counts, gate_up, down)
    torch.testing.assert_close(AllExpertsBackend()(rows, counts, gate_up, down), want, rtol=1e-12, atol=1e-10)


def test_graph_eligibility_and_decode_modes_on_a_cpu(model):
    ok, reason = decode_graph_supported(model)
    assert not ok and "CUDA" in reason
    with pytest.raises(ValueError, match="decode"):
        generate(model, None, 5, decode="graph-please")
