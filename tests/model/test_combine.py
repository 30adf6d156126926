"""The combine's weighted sum of each token's expert rows, slot by slot for one or two slots."""

from __future__ import annotations

import pytest
import torch

from biomoe.model.moe.dispatch import weighted_sum_of_slots


def _case(top_k: int, dtype: torch.dtype, tokens: int = 512, hidden: int = 64):
    torch.manual_seed(top_k)
    rows = torch.randn(tokens * top_k, hidden).to(dtype)
    row_of_slot = torch.randperm(tokens * top_k)
    weights = torch.softmax(torch.randn(tokens, top_k), dim=-1)
    picked = rows.double().index_select(0, row_of_slot).view(tokens, top_k, hidden)
    return rows, row_of_slot, weights, picked


@pytest.mark.parametrize("top_k", [1, 2, 3, 8])
@pytest.mark.parametrize("weighted", [True, False])
def test_each_token_gets_the_weighted_sum_of_its_rows(top_k: int, weighted: bool) -> None:
    rows, row_of_slot, weights, picked = _case(top_k, torch.float64)
    want = (picked * weights.double().unsqueeze(-1)).sum(1) if weighted else picked.sum(1)
    got = weighted_sum_of_slots(rows, weights if weighted else None, row_of_slot, top_k)
    assert got.dtype == rows.dtype
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("top_k", [2, 8])
def test_bf16_sum_is_no_less_accurate_than_products_then_a_reduction(top_k: int) -> None:
    rows, row_of_slot, weights, picked = _case(top_k, torch.bfloat16, tokens=2048, hidden=256)
    exact = (picked * weights.double().unsqueeze(-1)).sum(1)
    products_then_sum = (rows.index_select(0, row_of_slot).view(-1, top_k, rows.shape[-1])
                         * weights.to(rows.dtype).unsqueeze(-1)).sum(1)
    got = weighted_sum_of_slots(rows, weights, row_of_slot, top_k)
    assert got.dtype == torch.bfloat16
    error = (got.double() - exact).abs().mean()
    assert error <= (products_then_sum.double() - exact).abs().mean() * 1.0001
