"""The six expert GEMMs in Triton: the gather in the operand load, SwiGLU and its gradient in the epilogue.

The second route to the expert layer of ``bench.expert_gemms`` (the first is quack-kernels): the same
design, ScatterMoE-style, in Triton, which runs on any CUDA GPU the compiler supports. Two kernels:

* :func:`_rows_kernel`: per expert, ``C[r] = A[src(r)] @ B[e]`` over the expert's rows of the
  expert-sorted order, where ``src(r)`` is the token of row ``r`` when the A operand is gathered. The
  epilogue is a plain store, SwiGLU (``gate`` and ``up`` columns in two accumulators; the
  pre-activation is stored for the backward) or SwiGLU's gradient (scaled by the routing weight, with
  the score-scaled activation for the down weights' gradient and the routing weight's gradient
  reduced over the row).
* :func:`_weights_kernel`: per expert, ``W[e] = A[src(rows)]ᵀ @ B[rows]``: the weight gradients, a sum
  over the expert's rows (a variable-length K) with the gather along it.

Tiles are chosen by ``triton.autotune`` per shape. The grid has an upper bound of row tiles (``rows /
BLOCK_M + experts``) and each program finds its expert from the per-expert tile offsets on the
device, so nothing waits for the host. Layouts: ``gate_up [E, 2F, H]`` with the gate first, ``down
[E, H, F]``; pre-activation and its gradient ``[rows, 2F]``, gate first.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EPILOGUE_STORE, EPILOGUE_SWIGLU, EPILOGUE_DSWIGLU = 0, 1, 2

_ROW_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64}, num_warps=w, num_stages=s)
    for bm, bn, w, s in [(128, 128, 8, 3), (128, 64, 4, 4), (64, 128, 4, 4), (128, 128, 4, 3),
                         (64, 64, 4, 4), (128, 256, 8, 3)]
]
_WEIGHT_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=s)
    for bm, bn, bk, w, s in [(128, 128, 64, 8, 3), (128, 128, 32, 4, 4), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4),
                             (64, 64, 64, 4, 4)]
]


@triton.jit
def _find_tile(tile, offsets, E: tl.constexpr, BLOCK_M: tl.constexpr):
    """``(expert, its first row, its end, the tile's index within the expert)`` of row tile
    ``tile``; expert ``E`` where ``tile`` lies past the last expert's tiles. The experts' tile counts
    depend on BLOCK_M, which the autotuner varies, so they are summed here (E loads)."""
    e = tl.full((), E, tl.int32)
    first = tl.full((), 0, tl.int32)
    seen = tl.full((), 0, tl.int32)
    for i in range(E):
        lo = tl.load(offsets + i)
        hi = tl.load(offsets + i + 1)
        tiles = (hi - lo + BLOCK_M - 1) // BLOCK_M
        here = (tile >= seen) & (tile < seen + tiles)
        e = tl.where(here, i, e)
        first = tl.where(here, seen, first)
        seen += tiles
    return e, tile - first


@triton.autotune(configs=_ROW_CONFIGS, key=["N", "K", "EPILOGUE", "GATHER"])
@triton.jit
def _rows_kernel(a_ptr, src_ptr, b_ptr, offsets, c_ptr, pre_ptr, aux_ptr, score_ptr, dscore_ptr,
                 N, K, stride_am, stride_be, stride_bk, stride_bn, stride_cm, stride_pm, stride_xm,
                 E: tl.constexpr, GATHER: tl.constexpr, EPILOGUE: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    e, local = _find_tile(tl.program_id(0), offsets, E, BLOCK_M)
    if e >= E:
        return
    start, end = tl.load(offsets + e), tl.load(offsets + e + 1)
    rows = start + local * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < end
    src = tl.load(src_ptr + rows, mask=row_ok, other=0).to(tl.int64) if GATHER else rows.to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    ks = tl.arange(0, BLOCK_K)
    a_rows = a_ptr + src[:, None] * stride_am
    b_base = b_ptr + e.to(tl.int64) * stride_be
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + ks) < K
        a = tl.load(a_rows + (k0 + ks)[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        b_ptrs = b_base + (k0 + ks)[:, None] * stride_bk + cols[None, :] * stride_bn
        b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc)
        if EPILOGUE == 1:  # the up columns sit N columns after the gate columns
            b_up = tl.load(b_ptrs + N * stride_bn, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
            acc_up = tl.dot(a, b_up, acc_up)
    out_ok = row_ok[:, None] & col_ok[None, :]
    r64 = rows.to(tl.int64)[:, None]
    if EPILOGUE == 0:
        tl.store(c_ptr + r64 * stride_cm + cols[None, :], acc.to(c_ptr.dtype.element_ty), mask=out_ok)
    elif EPILOGUE == 1:  # c: SwiGLU [rows, N]; pre: [rows, 2N] gate then up
        gate, up = acc, acc_up
        tl.store(pre_ptr + r64 * stride_pm + cols[None, :], gate.to(pre_ptr.dtype.element_ty), mask=out_ok)
        tl.store(pre_ptr + r64 * stride_pm + N + cols[None, :], up.to(pre_ptr.dtype.element_ty), mask=out_ok)
        act = gate * tl.sigmoid(gate) * up
        tl.store(c_ptr + r64 * stride_cm + cols[None, :], act.to(c_ptr.dtype.element_ty), mask=out_ok)
    else:  # acc = dout @ down[e] (the unscaled activation gradient); c: d(pre) [rows, 2N]; aux: s·act
        gate = tl.load(pre_ptr + r64 * stride_pm + cols[None, :], mask=out_ok, other=0.0).to(tl.float32)
        up = tl.load(pre_ptr + r64 * stride_pm + N + cols[None, :], mask=out_ok, other=0.0).to(tl.float32)
        score = tl.load(score_ptr + rows, mask=row_ok, other=0.0)
        sig = tl.sigmoid(gate)
        silu = gate * sig
        act = silu * up
        dact = acc * score[:, None]
        dgate = dact * up * sig * (1.0 + gate * (1.0 - sig))
        tl.store(c_ptr + r64 * stride_cm + cols[None, :], dgate.to(c_ptr.dtype.element_ty), mask=out_ok)
        tl.store(c_ptr + r64 * stride_cm + N + cols[None, :], (dact * silu).to(c_ptr.dtype.element_ty), mask=out_ok)
        tl.store(aux_ptr + r64 * stride_xm + cols[None, :], (act * score[:, None]).to(aux_ptr.dtype.element_ty),
                 mask=out_ok)
        tl.atomic_add(dscore_ptr + rows, tl.sum(tl.where(out_ok, acc * act, 0.0), axis=1), mask=row_ok)


@triton.autotune(configs=_WEIGHT_CONFIGS, key=["M", "N"])
@triton.jit
def _weights_kernel(a_ptr, src_ptr, b_ptr, offsets, c_ptr, M, N, stride_am, stride_bm, stride_ce, stride_cm,
                    GATHER: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    e = tl.program_id(2)
    start, end = tl.load(offsets + e), tl.load(offsets + e + 1)
    ms = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    ns = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok, n_ok = ms < M, ns < N
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(start, end, BLOCK_K):
        rows = k0 + ks
        k_ok = rows < end
        src = tl.load(src_ptr + rows, mask=k_ok, other=0).to(tl.int64) if GATHER else rows.to(tl.int64)
        a = tl.load(a_ptr + src[None, :] * stride_am + ms[:, None], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptr + rows.to(tl.int64)[:, None] * stride_bm + ns[None, :], mask=k_ok[:, None] & n_ok[None, :],
                    other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + e.to(tl.int64) * stride_ce + ms[:, None] * stride_cm + ns[None, :],
             acc.to(c_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


def rows_gemm(a: torch.Tensor, src: torch.Tensor | None, b: torch.Tensor, offsets: torch.Tensor, out: torch.Tensor,
              n: int, epilogue: int = EPILOGUE_STORE, pre: torch.Tensor | None = None, aux: torch.Tensor | None = None,
              score: torch.Tensor | None = None, dscore: torch.Tensor | None = None) -> torch.Tensor:
    """``out[r] = a[src[r]] @ b[e]`` over each expert ``e``'s rows (``b``: [E, K, N or 2N] by its strides;
    ``src`` None: row ``r`` of ``a``), with the epilogue; ``rows`` = ``out.shape[0]``."""
    rows, k, experts = out.shape[0], a.shape[1], b.shape[0]
    unused = out  # pointer arguments an epilogue does not read

    def grid(meta):
        return (triton.cdiv(rows, meta["BLOCK_M"]) + experts, triton.cdiv(n, meta["BLOCK_N"]))

    _rows_kernel[grid](a, src if src is not None else offsets, b, offsets, out,
                       pre if pre is not None else unused, aux if aux is not None else unused,
                       score if score is not None else unused, dscore if dscore is not None else unused,
                       n, k, a.stride(0), b.stride(0), b.stride(1), b.stride(2), out.stride(0),
                       pre.stride(0) if pre is not None else 0, aux.stride(0) if aux is not None else 0,
                       E=experts, GATHER=src is not None, EPILOGUE=epilogue)
    return out


def weights_gemm(a: torch.Tensor, src: torch.Tensor | None, b: torch.Tensor, offsets: torch.Tensor,
                 out: torch.Tensor) -> torch.Tensor:
    """``out[e] = a[src[rows_e]]ᵀ @ b[rows_e]`` for every expert (``out``: [E, M, N]; zeros where empty)."""
    experts, m, n = out.shape

    def grid(meta):
        return (triton.cdiv(m, meta["BLOCK_M"]), triton.cdiv(n, meta["BLOCK_N"]), experts)

    _weights_kernel[grid](a, src if src is not None else offsets, b, offsets, out, m, n, a.stride(0), b.stride(0),
                          out.stride(0), out.stride(1), GATHER=src is not None)
    return out


def expert_step(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, dout: torch.Tensor,
                src: torch.Tensor, offsets: torch.Tensor, scores: torch.Tensor) -> dict[str, object]:
    """The six products of one expert MLP's step as closures (for timing), and the buffers they write.

    ``x``/``dout`` [tokens, H]; ``src`` [rows] the token of each expert-sorted row; ``scores`` [rows]
    float32 routing weights. Forward: pre-activation and SwiGLU, then the down projection. Backward:
    the activation gradient with the score scale and the score gradient, the two weight gradients and
    the input gradient per row (the sum over a token's k rows is the combine's, not a GEMM)."""
    rows = src.numel()
    E, two_f, H = gate_up.shape
    f = two_f // 2
    new = dict(device=x.device, dtype=x.dtype)
    pre, act = torch.empty(rows, two_f, **new), torch.empty(rows, f, **new)
    out_rows, dpre = torch.empty(rows, H, **new), torch.empty(rows, two_f, **new)
    act_scaled = torch.empty(rows, f, **new)
    dscore = torch.zeros(rows, device=x.device, dtype=torch.float32)
    dw_down, dw_up = torch.empty(E, H, f, **new), torch.empty(E, H, two_f, **new)
    dx_rows = torch.empty(rows, H, **new)
    up_t = gate_up.transpose(1, 2)  # [E, H, 2F]: K = H, gate columns then up columns
    down_t = down.transpose(1, 2)  # [E, F, H]

    def dswiglu():
        dscore.zero_()
        rows_gemm(dout, src, down, offsets, dpre, f, EPILOGUE_DSWIGLU, pre=pre, aux=act_scaled, score=scores,
                  dscore=dscore)

    return {
        "up+swiglu": lambda: rows_gemm(x, src, up_t, offsets, act, f, EPILOGUE_SWIGLU, pre=pre),
        "down": lambda: rows_gemm(act, None, down_t, offsets, out_rows, H),
        "dswiglu": dswiglu,
        "dW_down": lambda: weights_gemm(dout, src, act_scaled, offsets, dw_down),
        "dW_up": lambda: weights_gemm(x, src, dpre, offsets, dw_up),
        "dx": lambda: rows_gemm(dpre, None, gate_up, offsets, dx_rows, H),
        "_outputs": {"act": act, "out": out_rows, "dpre": dpre, "dscore": dscore, "dw_down": dw_down,
                     "dw_up": dw_up, "dx": dx_rows},
    }
