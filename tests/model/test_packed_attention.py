"""Rows packed with several documents: each document is computed exactly as if it were alone.

Checked on the CPU reference path (SDPA under a block-diagonal causal mask) in fp32: the logits
and per-base log-likelihoods of every packed document equal those of the document run alone,
no gradient flows from one document to another, and rotary angles restart with each document.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from biomoe.backends.te.layers import TECoreAttention
from biomoe.data.tokenizer import BOS_ID, N_ID, NucleotideTokenizer
from biomoe.model.backends import LayerBackends
from biomoe.model.config import ModelConfig
from biomoe.model.documents import DocumentLayout, host_document_offsets
from biomoe.model.losses import per_position_log_likelihood
from biomoe.model.transformer import KVCache, MoETransformer, rotary_tables, rotary_tables_at

BASES = torch.as_tensor(NucleotideTokenizer().encode("ACGT"), dtype=torch.long)


def tiny_model(num_kv_heads: int = 2, experts: str = "grouped", core_attention=None, seed: int = 0,
               **overrides) -> MoETransformer:
    fields = dict(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=num_kv_heads, num_experts=4,
                  top_k=2, ffn_hidden_size=32, init_std=0.3, moe_layers=[1])  # block 0 dense, block 1 MoE
    fields.update(overrides)
    torch.manual_seed(seed)
    return MoETransformer(ModelConfig(**fields), LayerBackends(experts=experts, core_attention=core_attention)).eval()


def random_bases(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return BASES[torch.randint(0, 4, (n,), generator=g)]


def document_inputs(bases: torch.Tensor) -> torch.Tensor:
    """As in training: [BOS] + bases[:-1]."""
    return torch.cat([torch.tensor([BOS_ID]), bases[:-1]])


def pack(docs: list[torch.Tensor], row_length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
    """One row: the documents end to end, then an N padding document. Returns (input_ids, labels,
    position_ids, each document's offset), all [1, row_length]."""
    inputs, labels, positions, offsets = [], [], [], []
    used = 0
    for doc in docs:
        offsets.append(used)
        inputs.append(document_inputs(doc))
        labels.append(doc)
        positions.append(torch.arange(doc.numel()))
        used += doc.numel()
    pad = row_length - used
    assert pad >= 0
    if pad:
        inputs.append(torch.full((pad,), N_ID))
        labels.append(torch.full((pad,), N_ID))
        positions.append(torch.arange(pad))
    return (torch.cat(inputs)[None], torch.cat(labels)[None], torch.cat(positions)[None], offsets)


def alone(model: MoETransformer, doc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits and per-base log-likelihood of one document run on its own, unpacked."""
    with torch.no_grad():
        logits = model(document_inputs(doc)[None]).logits[0]
    return logits, per_position_log_likelihood(logits[None], doc[None])[0]


BACKENDS = {
    "mha": dict(num_kv_heads=4),
    "gqa": dict(num_kv_heads=2),
    "gqa-loop-experts": dict(num_kv_heads=2, experts="loop"),
    "te-attention-cpu-fallback": dict(num_kv_heads=2, core_attention=TECoreAttention),
}


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_each_packed_document_scores_as_it_does_alone(backend):
    model = tiny_model(**BACKENDS[backend])
    docs = [random_bases(n, seed=n) for n in (23, 7, 40, 1)]
    ids, labels, positions, offsets = pack(docs, row_length=80)
    with torch.no_grad():
        out = model(ids, position_ids=positions)
    ll = per_position_log_likelihood(out.logits, labels)[0]
    for doc, offset in zip(docs, offsets):
        logits_alone, ll_alone = alone(model, doc)
        torch.testing.assert_close(out.logits[0, offset:offset + doc.numel()], logits_alone, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ll[offset:offset + doc.numel()], ll_alone, rtol=1e-5, atol=1e-5)
    # the same row read as one sequence gives the later documents other numbers (the check can fail)
    with torch.no_grad():
        unpacked = model(ids).logits[0]
    later = slice(offsets[1], offsets[2] + docs[2].numel())
    assert not torch.allclose(unpacked[later], out.logits[0, later], rtol=1e-3, atol=1e-3)


def test_several_packed_rows_in_one_batch():
    model = tiny_model()
    rows = [[random_bases(n, seed=10 + n) for n in lengths] for lengths in ((30, 12, 9), (5, 50))]
    packed = [pack(docs, row_length=56) for docs in rows]
    ids = torch.cat([p[0] for p in packed])
    positions = torch.cat([p[2] for p in packed])
    with torch.no_grad():
        logits = model(ids, position_ids=positions).logits
    for row, (docs, (_, _, _, offsets)) in enumerate(zip(rows, packed)):
        for doc, offset in zip(docs, offsets):
            torch.testing.assert_close(logits[row, offset:offset + doc.numel()], alone(model, doc)[0],
                                       rtol=1e-5, atol=1e-5)


def test_a_row_of_one_document_matches_the_unpacked_forward():
    model = tiny_model()
    doc = random_bases(48, seed=3)
    ids = document_inputs(doc)[None]
    with torch.no_grad():
        packed = model(ids, position_ids=torch.arange(48)[None]).logits
        plain = model(ids).logits
    torch.testing.assert_close(packed, plain, rtol=1e-5, atol=1e-5)


def test_no_gradient_flows_between_documents():
    model = tiny_model()
    docs = [random_bases(n, seed=n) for n in (20, 25, 11)]
    ids, labels, positions, offsets = pack(docs, row_length=60)
    embeddings: list[torch.Tensor] = []

    def leaf(module, inputs, output):  # the input embeddings as a leaf we can take gradients of
        embeddings.append(output.detach().requires_grad_(True))
        return embeddings[-1]

    handle = model.embed.register_forward_hook(leaf)
    try:
        out = model(ids, position_ids=positions)
    finally:
        handle.remove()
    ll = per_position_log_likelihood(out.logits, labels)[0]
    second = slice(offsets[1], offsets[1] + docs[1].numel())
    (-ll[second].sum()).backward()
    grad = embeddings[0].grad[0]
    assert torch.count_nonzero(grad[:offsets[1]]) == 0  # the document before it: exactly zero
    assert torch.count_nonzero(grad[offsets[2]:]) == 0  # the one after it (and the padding)
    assert grad[second].abs().sum(-1).gt(0).all()  # its own tokens do get gradient


def test_rotary_angles_restart_with_each_document():
    model = tiny_model()
    first, second = random_bases(100, seed=1), random_bases(30, seed=2)
    ids, _, positions, offsets = pack([first, second], row_length=130)
    assert offsets[1] == 100
    with torch.no_grad():
        at_100 = model(ids, position_ids=positions).logits[0, 100:]
    torch.testing.assert_close(at_100, alone(model, second)[0], rtol=1e-5, atol=1e-5)
    # per-token tables are the shared tables' rows for those positions, bit for bit
    cos, sin = rotary_tables_at(positions, 8, 10_000.0)
    ref_cos, ref_sin = rotary_tables(100, 8, 10_000.0, torch.device("cpu"))
    assert torch.equal(cos[0, 100:], ref_cos[:30]) and torch.equal(sin[0, :100], ref_sin)
    assert not torch.equal(cos[0, 100:], ref_cos[100:])  # position 100 is not position 0


def test_document_offsets_from_the_host_and_from_device_tensors_agree():
    positions = torch.tensor([[0, 1, 2, 0, 1, 0, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5, 6, 0, 1, 2]])
    cu, longest = host_document_offsets(positions.numpy())
    np.testing.assert_array_equal(cu, [0, 3, 5, 6, 10, 17, 20])
    assert cu.dtype == np.int32 and longest == 10  # 7, rounded up to 64 but never past the row
    device_cu, device_longest = DocumentLayout._device_offsets(positions == 0)
    np.testing.assert_array_equal(device_cu.numpy(), cu)
    assert device_cu.dtype == torch.int32 and device_longest == longest
    long_rows = torch.zeros(2, 200, dtype=torch.long)
    long_rows[0] = torch.cat([torch.arange(70), torch.arange(130)])
    long_rows[1] = torch.cat([torch.arange(150), torch.arange(50)])
    assert host_document_offsets(long_rows.numpy())[1] == 192  # 150 rounded up to 64s
    assert DocumentLayout._device_offsets(long_rows == 0)[1] == 192
    # a row that starts inside a document still starts a new one there
    cu, _ = host_document_offsets(np.array([[3, 4, 0, 1]]))
    np.testing.assert_array_equal(cu, [0, 2, 4])
    layout = DocumentLayout.of(torch.tensor([[3, 4, 0, 1]]))
    assert layout.mask()[0, 0].tolist() == [[True, False, False, False], [True, True, False, False],
                                            [False, False, True, False], [False, False, True, True]]


def test_packed_rows_are_refused_with_a_kv_cache_and_in_the_wrong_shape():
    model = tiny_model()
    ids = torch.full((1, 6), BOS_ID)
    cache = KVCache(model.config, batch_size=1, max_length=8)
    with pytest.raises(ValueError, match="KV cache"):
        model(ids, position_ids=torch.arange(6)[None], cache=cache)
    with pytest.raises(ValueError, match="shape"):
        model(ids, position_ids=torch.arange(5)[None])


def test_the_training_module_passes_position_ids_to_the_model():
    from biomoe.training.step.lightning_module import BioMoEModule

    model = tiny_model()
    module = BioMoEModule(model.config)
    module.model = model
    module.configure_model()
    docs = [random_bases(n, seed=n) for n in (15, 20)]
    ids, labels, positions, _ = pack(docs, row_length=40)
    batch = {"input_ids": ids, "labels": labels, "loss_mask": labels != N_ID, "position_ids": positions}
    with torch.no_grad():
        packed = module.predict_step(batch, 0)["log_likelihood"][0]
        plain = module.predict_step({k: v for k, v in batch.items() if k != "position_ids"}, 0)["log_likelihood"][0]
        loss = module._loss_terms(batch)["ce"]
    torch.testing.assert_close(packed[15:35], alone(model, docs[1])[1], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(plain[15:35], packed[15:35], rtol=1e-3, atol=1e-3)
    expected = -torch.cat([alone(model, d)[1] for d in docs]).mean()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
