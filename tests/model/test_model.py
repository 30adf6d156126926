"""Whole-model behaviour: shapes, causality, checkpoints that move between backends, configs."""

import pytest
import torch

from biomoe import ConfigError, ModelConfig, MoETransformer
from biomoe.model.losses import masked_cross_entropy


def with_experts(cfg: ModelConfig, backend: str) -> MoETransformer:
    from biomoe.model.backends import LayerBackends

    return MoETransformer(cfg, LayerBackends(experts=backend))


def tiny_config(**overrides) -> ModelConfig:
    base = dict(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                num_experts=4, top_k=2, ffn_hidden_size=32)
    base.update(overrides)
    return ModelConfig(**base)


def test_forward_shapes_and_finite():
    model = MoETransformer(tiny_config())
    out = model(torch.randint(0, 64, (2, 20)))
    assert out.logits.shape == (2, 20, 64)
    assert torch.isfinite(out.logits).all() and out.aux_loss > 0 and out.z_loss > 0


def test_causal_future_tokens_do_not_change_past_logits():
    torch.manual_seed(0)
    model = MoETransformer(tiny_config()).eval()
    ids = torch.randint(4, 9, (1, 24))
    changed = ids.clone()
    changed[0, 15:] = (changed[0, 15:] - 4 + 1) % 5 + 4
    a, b = model(ids).logits, model(changed).logits
    torch.testing.assert_close(a[:, :15], b[:, :15], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(a[:, 15:], b[:, 15:])


def test_checkpoint_moves_between_backends_with_same_loss(tmp_path):
    torch.manual_seed(0)
    ids = torch.randint(4, 8, (2, 32))
    labels, mask = ids.roll(-1, dims=1), torch.ones(2, 32, dtype=torch.bool)
    source = with_experts(tiny_config(), "loop")
    path = tmp_path / "model.pt"
    torch.save(source.state_dict(), path)
    loss_source = masked_cross_entropy(source(ids).logits, labels, mask)
    for backend in ("grouped", "loop"):
        target = with_experts(tiny_config(), backend)
        target.load_state_dict(torch.load(path))
        loss = masked_cross_entropy(target(ids).logits, labels, mask)
        torch.testing.assert_close(loss, loss_source, rtol=1e-5, atol=1e-6)
    keys = set(source.state_dict())
    assert "blocks.0.mlp.experts.gate_up_proj" in keys and "blocks.0.mlp.experts.down_proj" in keys
    assert source.state_dict()["blocks.0.mlp.experts.gate_up_proj"].shape == (4, 64, 32)


def test_dense_layers_and_active_params():
    cfg = tiny_config(moe_layers=[1])
    model = MoETransformer(cfg)
    assert not model.blocks[0].is_moe and model.blocks[1].is_moe
    assert model(torch.randint(0, 64, (1, 8))).logits.shape == (1, 8, 64)
    assert cfg.active_params_per_token() > 0


def test_a_shared_expert_adds_a_dense_mlp_every_token_passes_through():
    """``shared_expert_size``: each MoE block adds a SwiGLU MLP to its routed experts' output; a
    zero shared expert gives the plain MoE model's logits, a trained one changes them, every token's
    gradient reaches it, and the parameter counts include it."""
    torch.manual_seed(0)
    plain = MoETransformer(tiny_config(moe_layers=[1]))
    shared = MoETransformer(tiny_config(moe_layers=[1], shared_expert_size=16))
    assert shared.blocks[0].shared_expert is None and shared.blocks[1].shared_expert is not None  # MoE blocks only
    missing = shared.load_state_dict(plain.state_dict(), strict=False).missing_keys
    assert sorted(missing) == ["blocks.1.shared_expert.down_proj.weight", "blocks.1.shared_expert.gate_up_proj.weight"]
    ids = torch.randint(4, 8, (2, 12))
    torch.nn.init.zeros_(shared.blocks[1].shared_expert.down_proj.weight)
    torch.testing.assert_close(shared(ids).logits, plain(ids).logits)
    torch.nn.init.normal_(shared.blocks[1].shared_expert.down_proj.weight, std=0.5)
    logits = shared(ids).logits
    assert not torch.allclose(logits, plain(ids).logits)
    logits[:, 3].sum().backward()
    assert shared.blocks[1].shared_expert.gate_up_proj.weight.grad.abs().sum() > 0
    h = 32
    extra = shared.config.active_params_per_token() - plain.config.active_params_per_token()
    assert extra == 3 * h * 16 == sum(p.numel() for p in shared.blocks[1].shared_expert.parameters())


def test_a_shared_expert_cannot_be_exported_to_mixtral_and_says_so():
    from biomoe.interop.hf import check_exportable

    with pytest.raises(ConfigError, match="shared_expert_size is 16, and Mixtral has no shared expert"):
        check_exportable(MoETransformer(tiny_config(shared_expert_size=16)))


def test_block_listed_twice_in_moe_layers_counts_once_in_router_losses():
    """aux/z are averaged over the MoE blocks; a repeated index must not halve them."""
    torch.manual_seed(0)
    once = MoETransformer(tiny_config(moe_layers=[1]))
    twice = MoETransformer(tiny_config(moe_layers=[1, 1]))
    twice.load_state_dict(once.state_dict())
    ids = torch.randint(0, 64, (2, 8))
    a, b = once(ids), twice(ids)
    torch.testing.assert_close(b.aux_loss, a.aux_loss)
    torch.testing.assert_close(b.z_loss, a.z_loss)


@pytest.mark.parametrize("overrides, fragment", [
    (dict(top_k=5), "top_k"),
    (dict(hidden_size=30), "not divisible"),
    (dict(num_kv_heads=3), "num_kv_heads"),
    (dict(moe_layers=[7]), "moe_layers"),
    (dict(dropout=1.0), "dropout"),
])
def test_invalid_configs_fail_with_one_line(overrides, fragment):
    with pytest.raises(ConfigError, match=fragment) as info:
        tiny_config(**overrides)
    assert "\n" not in str(info.value)


def test_activation_checkpointing_keeps_keys_loss_and_gradients():
    from biomoe.model.activation_checkpointing import apply_activation_checkpointing

    torch.manual_seed(0)
    ids = torch.randint(4, 8, (2, 24))
    labels, mask = ids.roll(-1, dims=1), torch.ones(2, 24, dtype=torch.bool)
    plain = MoETransformer(tiny_config())
    wrapped = MoETransformer(tiny_config())
    wrapped.load_state_dict(plain.state_dict())
    apply_activation_checkpointing(wrapped)
    assert set(wrapped.state_dict()) == set(plain.state_dict())
    losses = []
    for model in (plain, wrapped):
        out = model(ids)
        loss = masked_cross_entropy(out.logits, labels, mask) + 0.01 * out.aux_loss + 0.001 * out.z_loss
        loss.backward()
        losses.append(loss.detach())
    torch.testing.assert_close(losses[0], losses[1])
    grads_plain = {n.replace("_checkpoint_wrapped_module.", ""): p.grad for n, p in plain.named_parameters()}
    for name, param in wrapped.named_parameters():
        torch.testing.assert_close(param.grad, grads_plain[name.replace("_checkpoint_wrapped_module.", "")],
                                   rtol=1e-5, atol=1e-6, msg=name)


def test_residual_dropout_acts_in_training_only():
    """Training: two forwards differ (random masks). Eval: the same function as dropout=0."""
    torch.manual_seed(0)
    with_dropout = MoETransformer(tiny_config(dropout=0.3))
    plain = MoETransformer(tiny_config())
    plain.load_state_dict(with_dropout.state_dict())  # dropout adds no parameters or keys
    ids = torch.randint(4, 8, (2, 16))
    with_dropout.train()
    assert not torch.allclose(with_dropout(ids).logits, with_dropout(ids).logits)
    with_dropout.eval(), plain.eval()
    torch.testing.assert_close(with_dropout(ids).logits, plain(ids).logits)


def test_dropout_masks_replay_under_activation_checkpointing():
    """Recomputation in backward must reuse the forward's dropout masks, or gradients are wrong."""
    from biomoe.model.activation_checkpointing import apply_activation_checkpointing

    torch.manual_seed(0)
    ref = MoETransformer(tiny_config(dropout=0.3))
    ckpt = MoETransformer(tiny_config(dropout=0.3))
    ckpt.load_state_dict(ref.state_dict())
    apply_activation_checkpointing(ckpt)
    ids = torch.randint(4, 8, (2, 16))
    grads = []
    for model in (ref, ckpt):
        torch.manual_seed(1)  # same masks in both forwards
        model(ids).logits.float().pow(2).mean().backward()
        grads.append({n.replace("_checkpoint_wrapped_module.", ""): p.grad.clone()
                      for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, rtol=1e-5, atol=1e-6)
