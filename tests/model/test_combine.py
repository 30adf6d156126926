"""The combine's weighted sum of each token's expert rows, slot by slot for one or two slots, and the
dispatch's gradient, which sums each token's copies the same way."""

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


@pytest.mark.parametrize("top_k", [1, 2, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dispatch_gradient_is_each_tokens_copies_summed(top_k: int, dtype: torch.dtype) -> None:
    """The dispatch's backward sums every token's gradient rows by gathers; autograd's gather
    backward (a scatter-add) gives the same, in bf16 too for up to two copies."""
    from biomoe.model.moe.dispatch import LocalDispatcher
    from biomoe.model.moe.router import RoutingResult

    torch.manual_seed(top_k)
    tokens, hidden, experts = 256, 32, 8
    x = torch.randn(tokens, hidden).to(dtype).requires_grad_()
    indices = torch.stack([torch.randperm(experts)[:top_k] for _ in range(tokens)])
    routing = RoutingResult(expert_indices=indices, expert_weights=torch.rand(tokens, top_k),
                            tokens_per_expert=torch.bincount(indices.reshape(-1), minlength=experts),
                            router_probs=torch.full((tokens, experts), 1 / experts),
                            aux_loss=torch.zeros(()), z_loss=torch.zeros(()))
    dispatched = LocalDispatcher().dispatch(x, routing)
    grad_rows = torch.randn_like(dispatched.hidden)
    dispatched.hidden.backward(grad_rows)
    reference = x.detach().clone().requires_grad_()
    token_of_row = torch.div(dispatched.state["order"], top_k, rounding_mode="floor")
    reference.index_select(0, token_of_row).backward(grad_rows)
    if top_k <= 2:  # one rounding of at most two addends either way: equal to the bit
        torch.testing.assert_close(x.grad, reference.grad, rtol=0, atol=0)
    else:  # more addends: the two orders of summation round differently
        torch.testing.assert_close(x.grad, reference.grad, rtol=1.6e-2, atol=1e-2 if dtype == torch.bfloat16 else 1e-5)
