"""Packed rows on a GPU: the variable-length kernels (torch's ``varlen_attn``, Transformer Engine's
THD attention) compute what the masked-SDPA reference computes, within bf16 rounding.

Error metric: relative error ‖a − b‖ / ‖b‖ over the whole tensor against the masked SDPA run in
fp32 on the same bf16 inputs; bound 2e-2 (bf16 keeps ~3 significant digits, a few roundings
accumulate). Attention that leaked across documents, or lost causality, is off by far more.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from biomoe.backends.te.availability import te_installed
from biomoe.model.config import ModelConfig
from biomoe.model.documents import (DocumentLayout, document_attention, host_document_offsets,
                                    masked_document_attention, varlen_available)
from biomoe.model.transformer import MoETransformer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

HEADS, KV_HEADS, HEAD_DIM, SEQ = 8, 2, 64, 512
DOCUMENTS = [[200, 7, 1, 150, 154], [512], [33, 33, 300, 146]]  # each row sums to SEQ


def positions() -> torch.Tensor:
    return torch.stack([torch.cat([torch.arange(n) for n in row]) for row in DOCUMENTS])


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def qkv(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    b = len(DOCUMENTS)
    make = lambda h: torch.randn(b, h, SEQ, HEAD_DIM, device="cuda", generator=g).to(torch.bfloat16)  # noqa: E731
    return make(HEADS), make(KV_HEADS), make(KV_HEADS)


def reference(q, k, v, layout: DocumentLayout) -> torch.Tensor:
    return masked_document_attention(q.float(), k.float(), v.float(), layout)


def test_offsets_computed_on_the_device_equal_the_hosts():
    pos = positions()
    host_cu, host_longest = host_document_offsets(pos.numpy())
    layout = DocumentLayout.of(pos.cuda())
    np.testing.assert_array_equal(layout.cu_seqlens.cpu().numpy(), host_cu)
    assert layout.cu_seqlens.dtype == torch.int32 and layout.max_seqlen == host_longest


@pytest.mark.skipif(not varlen_available(), reason="this torch has no torch.nn.attention.varlen")
def test_varlen_attention_equals_masked_sdpa():
    q, k, v = qkv()
    layout = DocumentLayout.of(positions().cuda())
    out = document_attention(q, k, v, layout)
    assert out.shape == (len(DOCUMENTS), SEQ, HEADS * HEAD_DIM) and out.dtype == torch.bfloat16
    assert relative_error(out, reference(q, k, v, layout)) < 2e-2
    # the plain causal attention over whole rows is far off: the check can fail
    whole = DocumentLayout.of(torch.arange(SEQ).expand(len(DOCUMENTS), SEQ).cuda())
    assert relative_error(out, reference(q, k, v, whole)) > 0.1


@pytest.mark.skipif(not te_installed(), reason="needs Transformer Engine (pip install biomoe[te])")
def test_te_thd_attention_equals_masked_sdpa():
    from biomoe.backends.te.layers import TECoreAttention

    q, k, v = qkv(1)
    layout = DocumentLayout.of(positions().cuda())
    core = TECoreAttention(HEADS, KV_HEADS, HEAD_DIM)
    out = core(q, k, v, layout)
    assert core.calls_te == 1 and core.calls_fallback == 0
    assert out.shape == (len(DOCUMENTS), SEQ, HEADS * HEAD_DIM)
    assert relative_error(out, reference(q, k, v, layout)) < 2e-2


def tiny_model() -> MoETransformer:
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                      ffn_hidden_size=256)
    return MoETransformer(cfg).cuda().to(torch.bfloat16).eval()


@pytest.mark.skipif(not varlen_available(), reason="this torch has no torch.nn.attention.varlen")
def test_packed_rows_on_the_gpu_score_each_document_as_alone_and_keep_gradients_apart():
    model = tiny_model()
    lengths = [100, 37, 120]
    docs = [torch.randint(4, 8, (n,), device="cuda") for n in lengths]
    ids = torch.cat(docs)[None]
    pos = torch.cat([torch.arange(n, device="cuda") for n in lengths])[None]
    with torch.no_grad():
        packed = model(ids, position_ids=pos).logits[0]
        for doc, start in zip(docs, np.cumsum([0, *lengths[:-1]])):
            alone = model(doc[None]).logits[0]
            assert relative_error(packed[start:start + doc.numel()], alone) < 2e-2
    embeddings = []

    def leaf(module, inputs, output):
        embeddings.append(output.detach().requires_grad_(True))
        return embeddings[-1]

    handle = model.embed.register_forward_hook(leaf)
    try:
        logits = model(ids, position_ids=pos).logits
    finally:
        handle.remove()
    logits[0, 100:137].float().sum().backward()
    grad = embeddings[0].grad[0]
    assert torch.count_nonzero(grad[:100]) == 0 and torch.count_nonzero(grad[137:]) == 0
    assert torch.count_nonzero(grad[100:137]) > 0


@pytest.mark.skipif(not varlen_available(), reason="this torch has no torch.nn.attention.varlen")
def test_offsets_from_the_host_let_the_forward_run_without_waiting_for_the_device():
    model = tiny_model()
    pos = positions()
    cu, longest = host_document_offsets(pos.numpy())
    ids = torch.randint(4, 8, pos.shape).pin_memory().cuda(non_blocking=True)
    pos_device = pos.pin_memory().cuda(non_blocking=True)
    cu_device = torch.from_numpy(cu).pin_memory().cuda(non_blocking=True)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.no_grad():
            layout = DocumentLayout.of(pos_device, cu_device, longest)
            out = model(ids, documents=layout)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(out.logits).all()
