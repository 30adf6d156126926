"""Rotary embeddings: the pair rotation of Llama/Mixtral/HF, computed in fp32 whatever the dtype."""

from __future__ import annotations

import pytest
import torch

from biomoe.model.transformer import apply_rotary, rotary_tables, rotary_tables_at


def _reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """[b, s, h, d]: (x1, x2) -> (x1·cos − x2·sin, x2·cos + x1·sin) in fp32, rounded once to x's dtype."""
    x1, x2 = x.float().chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("per_token", [False, True])
def test_rotation_is_the_fp32_pair_rotation_with_and_without_autograd(dtype, per_token):
    torch.manual_seed(0)
    x = torch.randn(2, 37, 4, 16).to(dtype)
    if per_token:  # packed rows: each token's own position
        cos, sin = rotary_tables_at(torch.randint(0, 37, (2, 37)), 16, 10_000.0)
    else:
        cos, sin = rotary_tables(37, 16, 10_000.0, torch.device("cpu"))
    expected = _reference(x, cos, sin)
    with torch.inference_mode():
        served = apply_rotary(x, cos, sin)
    trained = apply_rotary(x.clone().requires_grad_(dtype == torch.float32), cos, sin)
    assert served.dtype == trained.dtype == dtype
    assert torch.equal(served, trained.detach())  # the two code paths do the same arithmetic
    if dtype == torch.bfloat16:
        assert torch.equal(served, expected)  # fp32 math, one rounding
    else:
        torch.testing.assert_close(served, expected, rtol=0, atol=1e-6)
    # a rotation keeps each pair's length
    norms = lambda t: t.float().view(2, 37, 4, 2, 8).square().sum(3)  # noqa: E731
    torch.testing.assert_close(norms(served), norms(x), rtol=2e-2 if dtype == torch.bfloat16 else 1e-5, atol=1e-5)


def test_gradient_of_the_rotation():
    x = torch.randn(2, 5, 3, 8, dtype=torch.float64, requires_grad=True)
    cos, sin = rotary_tables(5, 8, 10_000.0, torch.device("cpu"))
    assert torch.autograd.gradcheck(lambda t: apply_rotary(t, cos.double(), sin.double()), (x,))
