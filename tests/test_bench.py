"""The benchmark's CPU-checkable parts: the FLOP count and the shared starting weights.

The bench compares HF Mixtral and biomoe losses step by step, which only means something if both
start from the same weights and compute the same function; that is checked here on the tiny shape.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from biomoe.bench.models import build_biomoe, build_hf, reference_init  # noqa: E402
from biomoe.bench.shapes import SHAPES  # noqa: E402

CPU = torch.device("cpu")


def test_flops_count_matmuls_and_causal_attention():
    shape = SHAPES["tiny"]
    head_dim = shape.hidden // shape.heads
    attn = 2 * shape.hidden**2 + 2 * shape.hidden * shape.kv_heads * head_dim
    moe = shape.top_k * 3 * shape.hidden * shape.ffn + shape.hidden * shape.experts
    n_active = shape.layers * (attn + moe) + shape.hidden * shape.vocab
    tokens = shape.seq * shape.micro_batch
    expected = 6 * n_active * tokens + 6 * shape.layers * shape.hidden * shape.seq * tokens
    assert shape.flops_per_step() == pytest.approx(expected)


def test_biomoe_started_from_the_hf_reference_computes_the_same_logits():
    shape = SHAPES["tiny"]
    init = reference_init(shape, CPU, seed=0)
    torch.manual_seed(0)  # the bench seeds every contender the same way: HF rebuilds the same weights
    hf = build_hf(shape, "eager", CPU)
    bio = build_biomoe(shape, "grouped", "bf16", CPU, init=init)
    ids = torch.randint(4, 8, (shape.micro_batch, shape.seq), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hf_logits = hf.model(input_ids=ids, use_cache=False).logits.float()
        bio_logits = bio.model(ids).logits.float()
    rel = (bio_logits - hf_logits).norm() / hf_logits.norm()
    assert rel < 3e-2, float(rel)  # bf16 weights and activations on both sides


def test_independent_init_differs_from_the_reference():
    """Guards the test above: without the reference weights the two models disagree."""
    shape = SHAPES["tiny"]
    torch.manual_seed(0)
    hf = build_hf(shape, "eager", CPU)
    torch.manual_seed(123)
    bio = build_biomoe(shape, "grouped", "bf16", CPU)
    ids = torch.randint(4, 8, (1, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hf_logits = hf.model(input_ids=ids, use_cache=False).logits.float()
        bio_logits = bio.model(ids).logits.float()
    assert (bio_logits - hf_logits).norm() / hf_logits.norm() > 0.1
