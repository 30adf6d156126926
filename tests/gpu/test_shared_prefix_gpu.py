"""On a GPU, alt windows continued from the reference window's cache score as the two windows read
whole (the flash kernel aligned to the lower right)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from biomoe.data.tokenizer import NucleotideTokenizer
from biomoe.inference.load import InferenceModel
from biomoe.inference.scoring import sequence_log_likelihood
from biomoe.inference.shared_prefix import Substitution, score_substitutions
from biomoe.model.config import ModelConfig
from biomoe.model.transformer import MoETransformer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 2e-3), (torch.bfloat16, 0.5)])
def test_continued_windows_equal_whole_windows_on_cuda(dtype: torch.dtype, tolerance: float) -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                      ffn_hidden_size=256)
    model = InferenceModel.wrap(MoETransformer(cfg).to("cuda", dtype).eval())
    rng = np.random.default_rng(0)
    tokens = NucleotideTokenizer()
    cases = []
    for _ in range(24):
        ref = "".join(rng.choice(list("ACGT"), 512))
        offset = int(rng.integers(0, 512))
        alt = ref[:offset] + "ACGT"[("ACGT".index(ref[offset]) + 1) % 4] + ref[offset + 1:]
        cases.append((ref, alt, offset))
    items = [Substitution(i, tokens.encode(r), tokens.encode(a), o) for i, (r, a, o) in enumerate(cases)]
    got: dict[int, tuple[float, float]] = {}
    score_substitutions(model, items, lambda k, r, a: got.__setitem__(k, (r, a)), batch_tokens=4096)
    for i, (ref, alt, _) in enumerate(cases):
        ref_ll, alt_ll = sequence_log_likelihood(model, [ref, alt])
        whole = float(np.nansum(alt_ll.astype(np.float64)) - np.nansum(ref_ll.astype(np.float64)))
        assert got[i][1] - got[i][0] == pytest.approx(whole, abs=tolerance)


@pytest.mark.parametrize("kv_heads", [4, 2])
@pytest.mark.parametrize("past, new", [(0, 64), (7, 64), (64, 64), (200, 17), (1000, 24)])
def test_flash_lower_right_is_causal_attention_aligned_to_the_last_key(past: int, new: int, kv_heads: int) -> None:
    from biomoe.compat.torch import flash_lower_right

    torch.manual_seed(1)
    q = torch.randn(2, 4, new, 64, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(2, kv_heads, past + new, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    got = flash_lower_right(q, k, v)
    assert got is not None
    mask = torch.ones(new, past + new, dtype=torch.bool, device="cuda").tril(diagonal=past)
    k, v = k.repeat_interleave(4 // kv_heads, dim=1), v.repeat_interleave(4 // kv_heads, dim=1)
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask)
    assert (got.float() - want).abs().max().item() < 2e-2
    assert flash_lower_right(q.float(), k.float(), v.float()) is None  # fp32: no flash kernel
