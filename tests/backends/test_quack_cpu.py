"""The ``quack`` expert backend's wiring on the CPU: its custom ops' torch reference (the contract
the GPU kernels share: interleaved pre-activations, the routing weights' gradient from the SwiGLU
backward) inside the autograd functions and the MoE layer, against a float64 expert loop."""

from __future__ import annotations

import pytest
import torch

from biomoe.backends.quack.experts import ExpertMLPOverRows, QuackBackend, expert_offsets, quack_availability
from biomoe.errors import ConfigError
from biomoe.model.moe.dispatch import LocalDispatcher
from biomoe.model.moe.experts import EXPERT_BACKENDS, ExpertBackendQuery, Experts, resolve_expert_backend
from biomoe.model.moe.layer import MoELayer
from biomoe.model.moe.router import RoutingResult, TopKRouter
from tests.helpers.expert_reference import reference_expert_mlp, relative_error, routing_case, unit_operands


def routing_result(indices: torch.Tensor, weights: torch.Tensor, experts: int) -> RoutingResult:
    counts = torch.bincount(indices.reshape(-1), minlength=experts)
    zero = torch.zeros((), dtype=weights.dtype)
    return RoutingResult(expert_indices=indices, expert_weights=weights, tokens_per_expert=counts,
                         aux_loss=zero, z_loss=zero, router_probs=None)


def over_tokens(ops: dict, indices: torch.Tensor, weights: torch.Tensor):
    """Output and gradients of the backend's token path (the one the layer takes under local dispatch)."""
    experts = ops["gate_up"].shape[0]
    x, gate_up, down = (ops[k].clone().requires_grad_(True) for k in ("x", "gate_up", "down"))
    weights = weights.clone().requires_grad_(True)
    plan = LocalDispatcher().plan(routing_result(indices, weights, experts))
    out = QuackBackend().over_tokens(x, weights, plan, gate_up, down)
    out.backward(ops["dout"])
    return out.detach(), x.grad, gate_up.grad, down.grad, weights.grad


CASES = [  # (tokens, experts, top_k, skew, empty experts)
    (96, 8, 2, 0.0, 0),
    (96, 8, 1, 3.0, 2),
    (64, 16, 8, 2.0, 3),
    (40, 4, 2, 6.0, 1),
]


@pytest.mark.parametrize("tokens,experts,top_k,skew,empty", CASES)
def test_token_path_matches_the_float64_expert_loop(tokens, experts, top_k, skew, empty):
    ops = unit_operands(tokens, 16, experts, 8, seed=tokens + top_k)
    indices, weights = routing_case(tokens, experts, top_k, skew=skew, empty=empty, seed=top_k)
    weights = weights.double()
    got = over_tokens(ops, indices, weights)
    want = reference_expert_mlp(ops["x"], ops["gate_up"], ops["down"], indices, weights, ops["dout"])
    for name, g, w in zip(("out", "dx", "d_gate_up", "d_down", "d_weights"), got, want):
        assert relative_error(g, w) < 1e-12, name
    if empty:  # experts no token reached have exactly zero gradients
        assert got[2][-empty:].abs().max() == 0 and got[3][-empty:].abs().max() == 0


def test_rows_path_is_each_expert_on_its_own_rows():
    experts, rows_per = 4, [5, 0, 7, 3]
    ops = unit_operands(sum(rows_per), 16, experts, 8)
    counts = torch.tensor(rows_per)
    rows, gate_up, down = (ops[k].clone().requires_grad_(True) for k in ("x", "gate_up", "down"))
    out = ExpertMLPOverRows.apply(rows, gate_up, down, expert_offsets(counts))
    out.backward(ops["dout"])
    # the same rows as tokens routed top-1 with weight one, in expert order
    indices = torch.repeat_interleave(torch.arange(experts), counts)[:, None]
    want = reference_expert_mlp(ops["x"], ops["gate_up"], ops["down"], indices,
                                torch.ones(len(indices), 1, dtype=torch.float64), ops["dout"])
    for g, w in zip((out, rows.grad, gate_up.grad, down.grad), want[:4]):
        assert relative_error(g, w) < 1e-12


def test_moe_layer_gives_quack_the_tokens_and_matches_the_grouped_layer():
    torch.manual_seed(0)
    hidden, experts, ffn = 16, 8, 8
    x = torch.randn(3, 20, hidden, dtype=torch.float64)
    results = {}
    for name in ("loop", "quack"):
        torch.manual_seed(1)
        layer = MoELayer(TopKRouter(hidden, experts, 2), Experts(experts, hidden, ffn, backend=name)).double()
        inp = x.clone().requires_grad_(True)
        out, aux, z = layer(inp)
        (out.square().sum() + aux + z).backward()
        results[name] = [out, inp.grad, layer.experts.gate_up_proj.grad, layer.experts.down_proj.grad,
                         layer.router.gate.weight.grad]
    for g, w in zip(results["quack"], results["loop"]):
        assert relative_error(g, w) < 1e-12


def test_a_dispatcher_that_moves_the_rows_itself_keeps_quack_on_the_rows_path():
    """Expert parallelism and TE's permute dispatcher move rows to where the experts are: those
    offer no token plan, so the layer dispatches and hands quack rows, with the same result."""

    class RowsOnly(LocalDispatcher):
        calls = 0

        def token_plan(self, routing):
            return None

        def dispatch(self, hidden, routing):
            RowsOnly.calls += 1
            return super().dispatch(hidden, routing)

    hidden, experts, ffn = 16, 8, 8
    x = torch.randn(3, 20, hidden, dtype=torch.float64)
    outputs = {}
    for name, dispatcher in (("tokens", None), ("rows", RowsOnly())):
        torch.manual_seed(1)
        layer = MoELayer(TopKRouter(hidden, experts, 2), Experts(experts, hidden, ffn, backend="quack"),
                         dispatcher).double()
        inp = x.clone().requires_grad_(True)
        out, aux, z = layer(inp)
        (out.square().sum() + aux + z).backward()
        outputs[name] = [out, inp.grad, layer.experts.gate_up_proj.grad, layer.router.gate.weight.grad]
    assert RowsOnly.calls == 1
    for g, w in zip(outputs["rows"], outputs["tokens"]):
        assert relative_error(g, w) < 1e-12


def test_token_path_traces_under_compile_and_matches_eager():
    ops = unit_operands(48, 16, 8, 8, dtype=torch.float32)
    indices, weights = routing_case(48, 8, 2, skew=1.0)
    eager = over_tokens(ops, indices, weights)
    compiled = torch.compile(over_tokens, backend="aot_eager", fullgraph=False)
    got = compiled(ops, indices, weights)
    for g, w in zip(got, eager):
        assert relative_error(g, w) < 1e-6


def _query(**kw) -> ExpertBackendQuery:
    base = dict(device=torch.device("cuda"), capability=(9, 0), precision="bf16", hidden_size=512,
                ffn_hidden_size=1024)
    base.update(kw)
    return ExpertBackendQuery(**base)


def test_quack_says_why_it_cannot_run(monkeypatch):
    import biomoe.backends.quack.experts as quack_experts

    monkeypatch.setattr(quack_experts, "quack_problem", lambda: None)
    assert quack_availability(_query()).runs
    assert "CUDA GPU" in quack_availability(_query(device=torch.device("cpu"), capability=None)).reason
    assert "sm 8.0" in quack_availability(_query(capability=(8, 0))).reason
    assert "bf16" in quack_availability(_query(precision="fp8-delayed")).reason
    assert not quack_availability(_query(hidden_size=500)).runs
    monkeypatch.setattr(quack_experts, "quack_problem", lambda: "not installed (pip install 'biomoe[kernels]')")
    verdict = quack_availability(_query())
    assert not verdict.runs and "quack-kernels, not installed" in verdict.reason


def test_naming_quack_where_it_cannot_run_is_one_clear_error():
    assert "quack" in EXPERT_BACKENDS.names()
    with pytest.raises(ConfigError) as err:
        resolve_expert_backend("quack", ExpertBackendQuery(device=torch.device("cpu")))
    assert str(err.value) == "model.runtime.expert_backend: quack needs a CUDA GPU; use grouped or auto here"
    fp32 = ExpertBackendQuery(device=torch.device("cuda"), capability=(9, 0), precision="fp8-delayed",
                              hidden_size=512, ffn_hidden_size=1024)
    with pytest.raises(ConfigError, match="quack needs bf16"):
        resolve_expert_backend("quack", fp32)
    assert resolve_expert_backend("auto", ExpertBackendQuery(device=torch.device("cpu")))[0] == "grouped"


def test_float32_experts_on_a_gpu_are_refused_in_one_line(monkeypatch):
    from biomoe.backends.quack.experts import check_operands

    x = torch.zeros(4, 8)
    check_operands(x, x)  # the CPU reference computes any dtype
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    with pytest.raises(ConfigError, match="quack computes in bf16 only, and the experts got float32"):
        check_operands(x, x)
    check_operands(x.bfloat16(), x.bfloat16())
