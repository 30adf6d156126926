"""The Triton expert GEMMs of ``bench.expert_gemms --impls triton`` on a GPU against float32 per-expert
products: all six, at unit-scale inputs, with even and skewed routing (empty experts), top-k 2 and 8."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

BF16_BOUND = 2e-2
"""bf16 operands and outputs with float32 accumulation land between 1e-3 and 1e-2 of the reference."""


@pytest.mark.parametrize("skew", [0.0, 6.0])
@pytest.mark.parametrize(("experts", "top_k", "ffn"), [(8, 2, 256), (32, 8, 64)])
def test_triton_expert_gemms_match_float32(experts: int, top_k: int, ffn: int, skew: float) -> None:
    pytest.importorskip("triton")
    from bench.expert_gemms import Inputs, Shape, triton_check

    shape = Shape("test", f"{experts}x{top_k}", tokens=1000, hidden=128, experts=experts, top_k=top_k, ffn=ffn)
    inp = Inputs(shape, torch.device("cuda"), skew=skew)
    counts = (inp.routing.offsets[1:] - inp.routing.offsets[:-1]).tolist()
    if skew:
        assert 0 in counts  # the skewed case must reach empty experts
    errors = triton_check(inp)
    assert set(errors) == {"up+swiglu", "down", "dswiglu", "dW_down", "dW_up", "dx"}
    assert all(err < BF16_BOUND for err in errors.values()), errors
