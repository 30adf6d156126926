"""The expert MLP's two custom ops: forward and backward over expert-sorted rows gathered from tokens.

Each op is opaque to ``torch.compile`` (a ``torch.library`` custom op with a fake for shapes), so a
compiled block calls the kernels as they are. On a CUDA tensor they run quack-kernels' grouped
GEMMs (:mod:`biomoe.compat.quack`); anywhere else a torch reference with the same contract, which
is what the CPU tests check the autograd wiring, the layouts and the score gradient against.

The contract, for rows ``r`` of expert ``e`` (``offsets[e] <= r < offsets[e+1]``) reading token
``gather[r]``:

* forward: ``preact[r]`` = ``x[gather[r]] @ gate_up[e].T`` with the gate and up columns
  *interleaved* (gate 0, up 0, gate 1, ...), the layout the kernels' epilogues read and write;
  ``out[r]`` = ``swiglu(preact[r]) @ down[e].T``.
* backward, for routing weights ``scale[r]`` and the gradient ``dout`` of the weighted sum over each
  token's rows: ``g = dout[gather[r]] @ down[e]``; ``dpreact`` = SwiGLU's gradient at ``preact``
  of ``scale[r] * g`` (interleaved); the weight gradients; ``dx_rows`` = ``dpreact @ gate_up[e]``;
  ``dscale[r]`` = ``swiglu(preact[r]) · g``, the routing weight's gradient (float32, or the
  inputs' dtype where wider).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from biomoe.compat import quack as qk

TILES = {
    "up": qk.TileConfig(128, 192, True, 2),
    "down": qk.TileConfig(128, 256, False, 2),
    "dswiglu": qk.TileConfig(128, 128, True, 2),
    "dW_down": qk.TileConfig(128, 256, False, 2),
    "dW_up": qk.TileConfig(128, 256, False, 2),
    "dx": qk.TileConfig(128, 256, False, 2),
}
"""The tile configuration of each of the six products on Hopper: for every product the fastest, or
within a few per cent of it, over the study's expert shapes in a sweep of quack's own candidates
(docs/benchmarks.md, "The expert GEMMs alone"). Fixed rather than autotuned, so that every
configuration the backend runs is one the tests have run."""


def interleave(t: Tensor) -> Tensor:
    """``[gate | up]`` columns -> ``gate 0, up 0, gate 1, up 1, ...``."""
    rows, width = t.shape
    return t.view(rows, 2, width // 2).transpose(1, 2).reshape(rows, width)


def deinterleave(t: Tensor) -> tuple[Tensor, Tensor]:
    """Interleaved columns -> (gate, up)."""
    return t[:, 0::2], t[:, 1::2]


# ------------------------------------------------------------------------------------ forward
@torch.library.custom_op("biomoe::expert_mlp_forward", mutates_args=())
def expert_mlp_forward(x: Tensor, gate_up: Tensor, down: Tensor, gather: Tensor,
                       offsets: Tensor) -> tuple[Tensor, Tensor]:
    """``(preact, out)`` of the module docstring's contract."""
    if x.is_cuda:
        return _forward_kernels(x, gate_up, down, gather, offsets)
    return _forward_reference(x, gate_up, down, gather, offsets)


@expert_mlp_forward.register_fake
def _(x, gate_up, down, gather, offsets):
    rows = gather.shape[0]
    return x.new_empty(rows, gate_up.shape[1]), x.new_empty(rows, x.shape[1])


def _forward_kernels(x, gate_up, down, gather, offsets):
    rows = gather.shape[0]
    preact = x.new_empty(rows, gate_up.shape[1])
    postact = x.new_empty(rows, gate_up.shape[1] // 2)
    qk.grouped_gemm_swiglu(x, gate_up.transpose(1, 2), offsets, gather, TILES["up"], preact, postact)
    out = x.new_empty(rows, x.shape[1])
    qk.grouped_gemm(postact, down.transpose(1, 2), out, TILES["down"], offsets_m=offsets)
    return preact, out


def _forward_reference(x, gate_up, down, gather, offsets):
    rows = x.index_select(0, gather.long())
    preact, out = [], []
    for e, (a, b) in enumerate(_spans(offsets)):
        pre = rows[a:b] @ gate_up[e].T
        gate, up = pre.chunk(2, dim=1)
        preact.append(interleave(pre))
        out.append((F.silu(gate) * up) @ down[e].T)
    return torch.cat(preact), torch.cat(out)


# ------------------------------------------------------------------------------------ backward
@torch.library.custom_op("biomoe::expert_mlp_backward", mutates_args=())
def expert_mlp_backward(dout: Tensor, x: Tensor, gate_up: Tensor, down: Tensor, preact: Tensor, gather: Tensor,
                        offsets: Tensor, scale: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(dx_rows, d_gate_up, d_down, dscale)`` of the module docstring's contract."""
    if dout.is_cuda:
        return _backward_kernels(dout, x, gate_up, down, preact, gather, offsets, scale)
    return _backward_reference(dout, x, gate_up, down, preact, gather, offsets, scale)


@expert_mlp_backward.register_fake
def _(dout, x, gate_up, down, preact, gather, offsets, scale):
    rows = gather.shape[0]
    return (x.new_empty(rows, x.shape[1]), gate_up.new_empty(gate_up.shape), down.new_empty(down.shape),
            scale.new_empty(rows, dtype=torch.promote_types(x.dtype, torch.float32)))


def _backward_kernels(dout, x, gate_up, down, preact, gather, offsets, scale):
    experts, two_f, hidden = gate_up.shape
    rows = gather.shape[0]
    dpreact = preact.new_empty(rows, two_f)
    scaled_postact = preact.new_empty(rows, two_f // 2)
    dscale = qk.grouped_gemm_dswiglu(dout, down, preact, offsets, gather, scale.float(), TILES["dswiglu"],
                                     dpreact, scaled_postact)
    d_down = down.new_empty(down.shape)
    qk.grouped_gemm(dout.T, scaled_postact, d_down, TILES["dW_down"], offsets_k=offsets, gather=gather)
    d_up_kn = gate_up.new_empty(experts, hidden, two_f)  # (E, H, 2F), gate/up columns interleaved
    qk.grouped_gemm(x.T, dpreact, d_up_kn, TILES["dW_up"], offsets_k=offsets, gather=gather)
    # (E, H, F, 2) -> (E, 2, F, H): the gate rows, then the up rows, as gate_up stores them
    d_gate_up = d_up_kn.view(experts, hidden, two_f // 2, 2).permute(0, 3, 2, 1).reshape(gate_up.shape)
    dx_rows = x.new_empty(rows, hidden)
    qk.grouped_gemm(dpreact, gate_up, dx_rows, TILES["dx"], offsets_m=offsets, interleaved_b=True)
    # an expert no row was routed to has a zero gradient, whatever its output buffer held
    routed = (offsets[1:] > offsets[:-1]).view(-1, 1, 1)
    return dx_rows, torch.where(routed, d_gate_up, 0), torch.where(routed, d_down, 0), dscale.float()


def _backward_reference(dout, x, gate_up, down, preact, gather, offsets, scale):
    gather = gather.long()
    x_rows, g_rows = x.index_select(0, gather), dout.index_select(0, gather)
    dx_rows, dscale = [], []
    d_gate_up, d_down = torch.zeros_like(gate_up), torch.zeros_like(down)
    for e, (a, b) in enumerate(_spans(offsets)):
        gate, up = deinterleave(preact[a:b])
        g = g_rows[a:b] @ down[e]
        sig = torch.sigmoid(gate)
        silu = gate * sig
        post = silu * up
        acc = torch.promote_types(post.dtype, torch.float32)  # a dot product: at least float32
        dscale.append((post.to(acc) * g.to(acc)).sum(-1))
        g = g * scale[a:b, None].to(g.dtype)
        dpre = torch.cat([g * up * sig * (1 + gate * (1 - sig)), g * silu], dim=1)  # [gate | up]
        d_down[e] = g_rows[a:b].T @ (post * scale[a:b, None].to(post.dtype))
        d_gate_up[e] = dpre.T @ x_rows[a:b]
        dx_rows.append(dpre @ gate_up[e])
    return torch.cat(dx_rows), d_gate_up, d_down, torch.cat(dscale)


def _spans(offsets: Tensor) -> list[tuple[int, int]]:
    """Each expert's ``(first row, end)`` (a host read: the reference path only)."""
    bounds = offsets.tolist()
    return list(zip(bounds[:-1], bounds[1:]))
