"""A model's structure without its values: the shapes the verifier compares a checkpoint with and
the tensors the inference loader fills are those of the model as built for training."""

from __future__ import annotations

import torch

from biomoe.model.config import ModelConfig
from biomoe.model.meta import empty_on, meta_model
from biomoe.model.transformer import MoETransformer

CFG = dict(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2, ffn_hidden_size=32)


def test_a_meta_model_has_the_built_models_tensors_and_no_values():
    cfg = ModelConfig(**CFG)
    built = MoETransformer(cfg).state_dict()
    meta = meta_model(cfg).state_dict()
    assert list(meta) == list(built)
    assert all(meta[k].is_meta and meta[k].shape == built[k].shape and meta[k].dtype == built[k].dtype
               for k in built)


def test_empty_on_allocates_every_tensor_keeps_ties_and_loads_a_state_dict():
    cfg = ModelConfig(**CFG, tie_embeddings=True)
    source = MoETransformer(cfg)
    model = empty_on(meta_model(cfg), "cpu")
    assert not any(t.is_meta for t in [*model.parameters(), *model.buffers()])
    assert model.lm_head.weight is model.embed.weight
    assert list(model.state_dict()) == list(source.state_dict())  # buffers keep their persistence
    model.load_state_dict(source.state_dict())
    ids = torch.randint(0, cfg.vocab_size, (1, 16))
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(ids).logits, source.eval()(ids).logits, rtol=0, atol=0)
