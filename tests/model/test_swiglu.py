"""SwiGLU projections without autograd run as two GEMMs and an in-place activation; the result is
the one-GEMM SwiGLU's, and a forward that keeps a graph still takes the one GEMM."""

from __future__ import annotations

import pytest
import torch

from biomoe.model.moe.experts import GroupedMMBackend, LoopBackend, grouped_mm_supported
from biomoe.model.swiglu import split_projection, swiglu, swiglu_into_gate
from biomoe.model.transformer import DenseMLP


def test_split_only_without_a_graph_to_keep() -> None:
    weight = torch.randn(8, 4, requires_grad=True)
    frozen = torch.randn(8, 4)
    assert not split_projection(torch.randn(2, 4), weight)
    assert split_projection(torch.randn(2, 4), frozen)  # grad mode on, nothing to differentiate
    with torch.no_grad():
        assert split_projection(torch.randn(2, 4), weight)
    with torch.inference_mode():
        assert split_projection(torch.randn(2, 4), weight)


def test_activation_in_place_equals_the_halves_of_one_output() -> None:
    torch.manual_seed(0)
    out = torch.randn(5, 12)
    gate, up = out[:, :6].clone(), out[:, 6:].clone()
    result = swiglu_into_gate(gate, up)
    assert result.data_ptr() == gate.data_ptr()
    torch.testing.assert_close(result, swiglu(out), rtol=0, atol=0)


def test_dense_mlp_without_autograd_equals_its_training_forward() -> None:
    torch.manual_seed(0)
    mlp = DenseMLP(16, 24)
    x = torch.randn(3, 7, 16)
    trained, _, _ = mlp(x)
    assert trained.requires_grad
    with torch.no_grad():
        scored, _, _ = mlp(x)
    torch.testing.assert_close(scored, trained.detach(), rtol=1e-5, atol=1e-6)


CUDA = pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                                        reason="needs a CUDA GPU")])


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_experts_without_autograd_equal_the_per_expert_loop(dtype: torch.dtype, device: str) -> None:
    torch.manual_seed(0)
    experts, hidden, ffn = 4, 16, 32
    gate_up = (torch.randn(experts, 2 * ffn, hidden) * 0.2).to(device, dtype)
    down = (torch.randn(experts, hidden, ffn) * 0.2).to(device, dtype)
    counts = torch.tensor([3, 0, 6, 7], device=device)
    rows = torch.randn(int(counts.sum()), hidden).to(device, dtype)
    if not grouped_mm_supported(rows, gate_up, down):
        pytest.skip("torch._grouped_mm cannot run here")
    with torch.no_grad():
        got = GroupedMMBackend()(rows, counts, gate_up, down)
        want = LoopBackend()(rows, counts, gate_up, down)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance)


def test_grouped_experts_keep_one_gemm_and_their_gradients_under_autograd(monkeypatch) -> None:
    """Under autograd gate and up stay one GEMM (two grouped GEMMs a forward with the down
    projection); without a graph to keep they split (three)."""
    torch.manual_seed(0)
    gate_up = (torch.randn(2, 16, 8) * 0.2).requires_grad_()
    down = (torch.randn(2, 8, 8) * 0.2).requires_grad_()
    rows = torch.randn(5, 8)
    counts = torch.tensor([2, 3])
    if not grouped_mm_supported(rows, gate_up, down):
        pytest.skip("torch._grouped_mm cannot run here")
    gemms: list[tuple[int, ...]] = []
    real = torch._grouped_mm

    def counting(*args, **kwargs):
        gemms.append(tuple(args[1].shape))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "_grouped_mm", counting)
    out = GroupedMMBackend()(rows, counts, gate_up, down)
    assert gemms == [(2, 8, 16), (2, 8, 8)]  # gate and up in one GEMM of 2 x 8 outputs, then down
    out.sum().backward()
    assert gate_up.grad is not None and down.grad is not None
    gemms.clear()
    with torch.no_grad():
        torch.testing.assert_close(out.detach(), GroupedMMBackend()(rows, counts, gate_up, down),
                                   rtol=1e-5, atol=1e-6)
    assert gemms == [(2, 8, 8), (2, 8, 8), (2, 8, 8)]  # split: gate, up, down
