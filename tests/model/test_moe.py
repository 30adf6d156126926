"""MoE layer: backends agree with each other and with a token-by-token dense reference."""

import pytest
import torch
import torch.nn.functional as F

from biomoe.model.moe import Experts, MoELayer, TopKRouter
from biomoe.model.moe.experts import GroupedMMBackend, LoopBackend, grouped_mm_supported

H, FF, E, K = 32, 48, 6, 2


def make_layer(backend: str, seed: int = 0) -> MoELayer:
    torch.manual_seed(seed)
    return MoELayer(TopKRouter(H, E, K), Experts(E, H, FF, backend=backend, init_std=0.1))


def dense_reference(layer: MoELayer, x: torch.Tensor) -> torch.Tensor:
    """Every token through its k experts one at a time, in float64."""
    x64 = x.double()
    logits = x64 @ layer.router.gate.weight.double().T
    probs = logits.softmax(-1)
    out = torch.zeros_like(x64)
    gu, dn = layer.experts.gate_up_proj.double(), layer.experts.down_proj.double()
    for t in range(x.shape[0]):
        w, idx = probs[t].topk(K)
        w = w / w.sum()
        for weight, e in zip(w, idx):
            gate, up = (gu[e] @ x64[t]).chunk(2)
            out[t] += weight * (dn[e] @ (F.silu(gate) * up))
    return out


def test_moe_layer_equals_dense_reference():
    layer = make_layer("loop")
    x = torch.randn(37, H)
    out, _, _ = layer(x)
    torch.testing.assert_close(out.double(), dense_reference(layer, x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(3, 5, H), (64, H)])
def test_grouped_equals_loop_outputs_and_gradients(shape):
    loop, grouped = make_layer("loop"), make_layer("grouped")
    grouped.load_state_dict(loop.state_dict())
    x = torch.randn(*shape)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    out1, aux1, z1 = loop(x1)
    out2, aux2, z2 = grouped(x2)
    torch.testing.assert_close(out1, out2, rtol=1e-5, atol=1e-6)
    g = torch.randn_like(out1)
    (out1 * g).sum().add(aux1 + z1).backward()
    (out2 * g).sum().add(aux2 + z2).backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-6)
    for (n1, p1), (_, p2) in zip(loop.named_parameters(), grouped.named_parameters()):
        torch.testing.assert_close(p1.grad, p2.grad, rtol=1e-5, atol=1e-6, msg=n1)


def test_grouped_backend_really_uses_grouped_mm_on_cpu(monkeypatch):
    """The layer's forward runs ``torch._grouped_mm`` (gate/up and down) and never the loop fallback."""
    rows = torch.randn(10, H)
    gu = torch.randn(E, 2 * FF, H)
    assert grouped_mm_supported(rows, gu, torch.randn(E, H, FF)), "expected the grouped path on CPU"
    calls = []
    real = torch._grouped_mm

    def spy(*args, **kwargs):
        calls.append(args[1].shape)
        return real(*args, **kwargs)

    def no_loop(*args, **kwargs):
        raise AssertionError("the grouped backend fell back to the per-expert loop")

    monkeypatch.setattr(torch, "_grouped_mm", spy)
    monkeypatch.setattr(LoopBackend, "__call__", no_loop)
    layer = make_layer("grouped")
    x = torch.rand(16, H)
    out, _, _ = layer(x)
    assert len(calls) >= 2 and calls[-1][-1] == H  # gate/up GEMM(s), then the down projection to H
    torch.testing.assert_close(out.double(), dense_reference(layer, x), rtol=1e-4, atol=1e-5)


def test_backends_with_zero_token_experts():
    """Experts 0, 3 and the last receive nothing; gradients for them are exactly zero."""
    torch.manual_seed(3)
    rows = torch.randn(12, H, requires_grad=True)
    counts = torch.tensor([0, 5, 4, 0, 3, 0])
    gu = torch.randn(E, 2 * FF, H, requires_grad=True)
    dn = torch.randn(E, H, FF, requires_grad=True)
    outs, grads = [], []
    for backend in (LoopBackend(), GroupedMMBackend()):
        for t in (rows, gu, dn):
            t.grad = None
        out = backend(rows, counts, gu, dn)
        out.square().sum().backward()
        outs.append(out.detach())
        grads.append([t.grad.clone() for t in (rows, gu, dn)])
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-5)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)
    for e in (0, 3, 5):
        assert grads[1][1][e].abs().sum() == 0 and grads[1][2][e].abs().sum() == 0
    assert grads[1][1][1].abs().sum() > 0


def test_all_tokens_to_one_expert():
    layer = make_layer("grouped")
    with torch.no_grad():
        layer.router.gate.weight.zero_()
        layer.router.gate.weight[2] = 10.0  # expert 2 wins for positive-sum inputs
    x = torch.rand(16, H)
    out, _, _ = layer(x)
    torch.testing.assert_close(out.double(), dense_reference(layer, x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("probs_applied", [False, True])
@pytest.mark.parametrize("top_k", [1, 2, 8])
def test_dispatch_and_combine_gradients_equal_autograd_of_the_plain_gather(probs_applied, top_k):
    """The gather-only dispatch/combine (no scatter-add) against autograd through index ops, float64."""
    from biomoe.model.moe.dispatch import LocalDispatcher
    from biomoe.model.moe.router import RoutingResult, expert_counts

    gen = torch.Generator().manual_seed(top_k)
    tokens, hidden, experts = 29, 6, 8
    x = torch.randn(tokens, hidden, dtype=torch.float64, generator=gen, requires_grad=True)
    indices = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)])
    weights = torch.rand(tokens, top_k, dtype=torch.float64, generator=gen).requires_grad_()
    scale = torch.randn(tokens * top_k, hidden, dtype=torch.float64, generator=gen)  # a stand-in "expert"
    routing = RoutingResult(indices, weights, expert_counts(indices, experts), torch.empty(0), torch.zeros(()),
                            torch.zeros(()))
    dispatcher = LocalDispatcher()
    dispatched = dispatcher.dispatch(x, routing)
    assert torch.equal(dispatched.tokens_per_expert, torch.bincount(indices.reshape(-1), minlength=experts))
    rows = dispatched.hidden * scale
    if probs_applied:
        rows = rows * dispatched.probs.unsqueeze(-1)
    out = dispatcher.combine(rows, dispatched, routing, probs_applied)

    order = torch.argsort(indices.reshape(-1), stable=True)
    ref_rows = x[order // top_k] * scale * weights.reshape(-1)[order].unsqueeze(-1)
    ref = torch.zeros_like(x).index_add(0, order // top_k, ref_rows)
    torch.testing.assert_close(out, ref)
    assert (indices.reshape(-1)[order].diff() >= 0).all()  # rows come out expert-major

    g = torch.randn(tokens, hidden, dtype=torch.float64, generator=gen)
    got = torch.autograd.grad((out * g).sum(), (x, weights))
    want = torch.autograd.grad((ref * g).sum(), (x, weights))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
