"""The expert MLP in float64, one expert at a time, with autograd: what every expert kernel is
checked against (output, input gradient, both weight gradients and the routing weights' gradient)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def routing_case(tokens: int, experts: int, top_k: int, *, skew: float = 0.0, empty: int = 0,
                 seed: int = 0, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """``(expert_indices [tokens, k], weights [tokens, k])``: each token picks ``top_k`` distinct
    experts; ``skew`` favours low-numbered experts; the last ``empty`` experts receive no token."""
    g = torch.Generator().manual_seed(seed)
    usable = experts - empty
    logits = torch.rand(tokens, usable, generator=g) + skew * torch.linspace(1, 0, usable)
    indices = logits.topk(top_k, dim=1).indices
    weights = torch.softmax(torch.randn(tokens, top_k, generator=g), dim=1)
    return indices.to(device), weights.to(device)


def unit_operands(tokens: int, hidden: int, experts: int, ffn: int, *, seed: int = 0, device: str = "cpu",
                  dtype: torch.dtype = torch.float64) -> dict[str, torch.Tensor]:
    """Unit-scale tokens, weights scaled so every product stays unit-scale, an output gradient."""
    g = torch.Generator().manual_seed(seed + 1)
    t = {"x": torch.randn(tokens, hidden, generator=g),
         "gate_up": torch.randn(experts, 2 * ffn, hidden, generator=g) * hidden ** -0.5,
         "down": torch.randn(experts, hidden, ffn, generator=g) * ffn ** -0.5,
         "dout": torch.randn(tokens, hidden, generator=g)}
    return {k: v.to(device=device, dtype=dtype) for k, v in t.items()}


def reference_expert_mlp(x, gate_up, down, indices, weights, dout):
    """``(out, dx, d_gate_up, d_down, d_weights)`` in float64 by autograd over a per-token loop."""
    x, gate_up, down, weights = (t.detach().double().requires_grad_(True) for t in (x, gate_up, down, weights))
    out = torch.zeros_like(x)
    for e in range(gate_up.shape[0]):
        tok, slot = (indices == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        pre = x[tok] @ gate_up[e].T
        gate, up = pre.chunk(2, dim=1)
        y = (F.silu(gate) * up) @ down[e].T
        out = out.index_add(0, tok, y * weights[tok, slot, None])
    out.backward(dout.double())
    return out.detach(), x.grad, gate_up.grad, down.grad, weights.grad


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    if not torch.isfinite(got).all():
        return float("inf")
    return float((got - want).norm() / want.norm().clamp_min(1e-300))
