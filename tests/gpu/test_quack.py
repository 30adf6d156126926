"""The ``quack`` expert backend's kernels on a Hopper GPU against the float64 expert loop: output,
input gradient, both weight gradients and the routing weights' gradient, at unit-scale inputs,
skewed routing with empty experts, top-k 1, 2 and 8, under every tile configuration the backend
runs; and a compiled model against the eager one and against the ``grouped`` backend."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.expert_reference import reference_expert_mlp, relative_error, routing_case, unit_operands

quack_ready = False
if torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9:
    from biomoe.compat.quack import quack_problem

    quack_ready = quack_problem() is None

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not quack_ready, reason="needs quack-kernels on a Hopper GPU")]

BF16_BOUND = 2e-2
"""bf16 operands and outputs with float32 accumulation land between 1e-3 and 1e-2 of the reference."""


def _token_path(ops, indices, weights):
    from biomoe.backends.quack.experts import QuackBackend
    from biomoe.model.moe.dispatch import LocalDispatcher
    from biomoe.model.moe.router import RoutingResult

    experts = ops["gate_up"].shape[0]
    x, gate_up, down = (ops[k].clone().requires_grad_(True) for k in ("x", "gate_up", "down"))
    weights = weights.clone().requires_grad_(True)
    counts = torch.bincount(indices.reshape(-1), minlength=experts)
    zero = torch.zeros((), device=x.device)
    plan = LocalDispatcher().plan(RoutingResult(indices, weights, counts, zero, zero, None))
    out = QuackBackend().over_tokens(x, weights, plan, gate_up, down)
    out.backward(ops["dout"])
    torch.cuda.synchronize()
    return out.detach(), x.grad, gate_up.grad, down.grad, weights.grad


def _all_tiles():
    from biomoe.backends.quack.ops import TILES

    return sorted(set(TILES.values()), key=lambda t: t.label())


@pytest.mark.parametrize("tile", _all_tiles() if quack_ready else [], ids=lambda t: t.label().replace(" ", "-"))
@pytest.mark.parametrize("tokens,experts,top_k,skew,empty", [
    (4096, 8, 2, 0.0, 0), (4096, 8, 1, 3.0, 2), (8192, 32, 8, 2.0, 5), (2048, 64, 8, 4.0, 9)])
def test_kernels_match_the_float64_loop(monkeypatch, tile, tokens, experts, top_k, skew, empty):
    from biomoe.backends.quack import ops as quack_ops

    monkeypatch.setattr(quack_ops, "TILES", {op: tile for op in quack_ops.TILES})
    hidden, ffn = 256, 128
    ops = unit_operands(tokens, hidden, experts, ffn, seed=experts + top_k, device="cuda", dtype=torch.bfloat16)
    indices, weights = routing_case(tokens, experts, top_k, skew=skew, empty=empty, seed=top_k, device="cuda")
    for key in ops:  # poison nothing: fresh inputs every case, outputs allocated by the kernels
        assert torch.isfinite(ops[key]).all()
    got = _token_path(ops, indices, weights)
    want = reference_expert_mlp(ops["x"], ops["gate_up"], ops["down"], indices, weights, ops["dout"])
    for name, g, w in zip(("out", "dx", "d_gate_up", "d_down", "d_weights"), got, want):
        assert relative_error(g, w) < BF16_BOUND, f"{name}: {relative_error(g, w):.2e}"
    if empty:
        assert got[2][-empty:].abs().max() == 0 and got[3][-empty:].abs().max() == 0


def test_compiled_model_trains_like_eager_and_like_the_grouped_backend():
    from biomoe.build import build_model
    from biomoe.model.config import ModelConfig, RuntimeConfig

    cfg = ModelConfig(vocab_size=64, hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=8,
                      top_k=2, ffn_hidden_size=256)
    tokens = torch.randint(4, 64, (4, 256), device="cuda")
    grads, losses = {}, {}
    for name, backend, compile_ in (("grouped", "grouped", False), ("quack", "quack", False),
                                    ("quack-compiled", "quack", True)):
        torch.manual_seed(0)
        runtime = RuntimeConfig(expert_backend=backend, compile=compile_, attention_backend="torch",
                                norm_backend="torch", router_backend="torch", dispatch_backend="torch")
        with torch.device("cuda"):
            model = build_model(cfg, runtime, device=torch.device("cuda")).model
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(tokens)
        loss = out.logits.float().square().mean() + out.aux_loss + out.z_loss
        loss.backward()
        losses[name] = loss.item()
        grads[name] = {n: p.grad.float() for n, p in model.named_parameters() if p.grad is not None}
    for name in ("quack", "quack-compiled"):
        assert abs(losses[name] - losses["grouped"]) < 1e-2 * abs(losses["grouped"])
        assert grads[name].keys() == grads["grouped"].keys(), name
        whole = relative_error(torch.cat([g.flatten() for g in grads[name].values()]),
                               torch.cat([g.flatten() for g in grads["grouped"].values()]))
        worst = sorted(((relative_error(g, grads["grouped"][n]), n) for n, g in grads[name].items()), reverse=True)
        assert whole < BF16_BOUND, f"{name}: {whole:.2e}; worst parameters {worst[:4]}"
