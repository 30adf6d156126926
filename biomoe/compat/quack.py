"""quack-kernels (CUTLASS Python DSL grouped GEMMs) as biomoe's ``quack`` expert backend uses them.

Tested with quack-kernels 0.6.5 and nvidia-cutlass-dsl 4.7.1 on Hopper (sm 9.0), bf16.

Public quack API used: ``quack.gemm_interface.gemm_act`` / ``gemm_dact`` (grouped GEMM with the
gated activation or its gradient in the epilogue, the gather of A in the operand load) with an
explicit ``config``, and ``quack.gemm_config.GemmConfig``. Internal: ``gemm_tuned.fn``, the plain
grouped GEMM with an explicit tile configuration (the public ``gemm`` takes none), used for the
down-projection and the weight and input gradients.

quack fingerprints its epilogue functions to key its compile cache; functions of libraries found
outside a ``site-packages`` (or ``dist-packages``) folder are fingerprinted by their globals, which
in the CUTLASS DSL include loggers and context variables that it cannot key, so the first GEMM
fails with "no fail-closed semantic key". Install both packages into an environment (``pip install
'biomoe[kernels]'``), not with ``pip --target`` into an arbitrary folder.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from torch import Tensor

TESTED_WITH = {"quack-kernels": "0.6.5", "nvidia-cutlass-dsl": "4.7.1"}

__all__ = ["TESTED_WITH", "TileConfig", "quack_problem", "grouped_gemm", "grouped_gemm_swiglu",
           "grouped_gemm_dswiglu"]


@dataclass(frozen=True)
class TileConfig:
    """One Hopper tile configuration: CTA tile, ping-pong or cooperative warp groups, cluster."""

    tile_m: int
    tile_n: int
    pingpong: bool
    cluster_m: int

    def label(self) -> str:
        return f"{self.tile_m}x{self.tile_n} {'pingpong' if self.pingpong else 'cooperative'} cluster {self.cluster_m}"


@functools.lru_cache(maxsize=1)
def quack_problem() -> str | None:
    """Why quack cannot be used here (None when it imports): not installed, or a broken install (its
    error kept, so the line that refuses the backend says what is wrong)."""
    try:
        import quack.gemm_interface  # noqa: F401  (optional dependency)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("quack", "cutlass"):
            return "not installed (pip install 'biomoe[kernels]')"
        return f"installed but does not import ({exc})"
    except Exception as exc:  # a broken install raises OSError/RuntimeError too
        return f"installed but does not import ({type(exc).__name__}: {exc})"
    return None


@functools.lru_cache(maxsize=None)
def _config(tile: TileConfig):
    from quack.gemm_config import GemmConfig

    return GemmConfig(tile_m=tile.tile_m, tile_n=tile.tile_n, pingpong=tile.pingpong, cluster_m=tile.cluster_m,
                      cluster_n=1, is_dynamic_persistent=False, device_capacity=9)


def grouped_gemm_swiglu(x: Tensor, w_kn: Tensor, offsets: Tensor, gather: Tensor, tile: TileConfig,
                        preact: Tensor, postact: Tensor) -> None:
    """``preact[r] = x[gather[r]] @ w_kn[e]`` for the rows ``r`` of expert ``e`` (its columns the
    gate and up halves interleaved), ``postact = silu(gate) * up``. ``w_kn`` is ``(E, H, 2F)`` with
    the gate columns first, then the up columns."""
    from quack.gemm_interface import gemm_act

    gemm_act(x, w_kn, activation="swiglu", cu_seqlens_m=offsets, A_idx=gather, concat_layout=("B",),
             preact_out=preact, postact_out=postact, tuned=False, config=_config(tile))


def grouped_gemm_dswiglu(dout: Tensor, w_kn: Tensor, preact: Tensor, offsets: Tensor, gather: Tensor,
                         scale: Tensor, tile: TileConfig, dpreact: Tensor, scaled_postact: Tensor) -> Tensor:
    """The SwiGLU backward of rows gathered from ``dout``: ``g = scale[r] * dout[gather[r]] @ w_kn[e]``;
    writes ``dpreact`` (interleaved like ``preact``) and ``scale * swiglu(preact)``; returns the
    float32 ``Σ_f swiglu(preact) · (dout[gather[r]] @ w_kn[e])`` per row (the scale's gradient)."""
    from quack.gemm_interface import gemm_dact

    _, _, reduced = gemm_dact(dout, w_kn, PreAct=preact, activation="swiglu", dx_out=dpreact,
                              postact_out=scaled_postact, colvec_scale=scale, colvec_reduce=True,
                              cu_seqlens_m=offsets, A_idx=gather, tuned=False, config=_config(tile))
    return reduced


def grouped_gemm(a: Tensor, b: Tensor, out: Tensor, tile: TileConfig, *, offsets_m: Tensor | None = None,
                 offsets_k: Tensor | None = None, gather: Tensor | None = None, interleaved_b: bool = False) -> None:
    """``out = a @ b`` grouped along M (``offsets_m``: ``b`` is ``(E, K, N)``) or along K
    (``offsets_k``: ``out`` is ``(E, M, N)``), ``a``'s rows (M) or columns (K) read through
    ``gather``; ``interleaved_b``: ``b``'s gate/up halves are consumed interleaved."""
    from quack.gemm_interface import gemm_tuned

    gemm_tuned.fn(a, b, out, config=_config(tile), cu_seqlens_m=offsets_m, cu_seqlens_k=offsets_k, A_idx=gather,
                  concat_layout=("B",) if interleaved_b else None)
