"""Tokens fed to a KV cache that already holds some: each new token sees the cached ones and the
new ones before it, exactly as in one causal pass over the whole sequence (fp32, CPU)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from biomoe.model.config import ModelConfig
from biomoe.model.transformer import KVCache, MoETransformer, _continued_attention


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, past: int) -> torch.Tensor:
    """Softmax attention written out: query i at position past + i sees keys 0..past + i."""
    s, total = q.shape[2], k.shape[2]
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    allowed = torch.arange(total)[None, :] <= (past + torch.arange(s))[:, None]
    return scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v


@pytest.mark.parametrize("past, new", [(0, 7), (3, 9), (9, 9), (12, 5), (40, 3)])
def test_continued_attention_is_causal_from_the_lower_right(past: int, new: int) -> None:
    torch.manual_seed(past * 100 + new)
    q = torch.randn(2, 4, new, 16, dtype=torch.float64)
    k, v = (torch.randn(2, 4, past + new, 16, dtype=torch.float64) for _ in range(2))
    got = _continued_attention(q, k, v, past)
    torch.testing.assert_close(got, reference_attention(q, k, v, past))
    if past == 0:
        torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_continued_attention_takes_grouped_key_value_heads() -> None:
    torch.manual_seed(3)
    q = torch.randn(2, 4, 9, 16, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 21, 16, dtype=torch.float64) for _ in range(2))
    want = reference_attention(q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1), 12)
    torch.testing.assert_close(_continued_attention(q, k, v, 12), want)


@pytest.mark.parametrize("split", [1, 20, 32, 50])
def test_a_sequence_fed_in_two_parts_scores_as_one_pass(split: int) -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                      ffn_hidden_size=32, init_std=0.3)
    model = MoETransformer(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (3, 64))
    with torch.no_grad():
        whole = model(ids).logits
        cache = KVCache(cfg, 3, 64)
        first = model(ids[:, :split], cache=cache).logits
        rest = model(ids[:, split:], cache=cache).logits
    torch.testing.assert_close(torch.cat([first, rest], dim=1), whole, rtol=1e-4, atol=1e-5)
