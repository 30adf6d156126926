"""Router statistics in checkpoints: what is kept, and checkpoints of earlier versions still load."""

from __future__ import annotations

import torch

from biomoe.model.config import ModelConfig
from biomoe.model.transformer import MoETransformer
from biomoe.training.step.resume_state import collect_resume_state, restore_resume_state


def _model() -> MoETransformer:
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                      ffn_hidden_size=32, router_bias_update_rate=0.01)
    return MoETransformer(cfg)


def _train_forward(model: MoETransformer) -> None:
    model.train()
    model(torch.randint(0, 4, (2, 16)))


def test_routers_keep_only_the_statistics_that_are_read():
    model = _model()
    _train_forward(model)
    routers = collect_resume_state(model)["routers"]
    assert routers and all(set(saved) == {"load_counts", "step_counts"} for saved in routers.values())
    for layer in model.moe_layers():
        assert not hasattr(layer.router, "prob_sums") and not hasattr(layer.router, "routed_tokens")
        assert not hasattr(layer.router, "load_fraction") and not hasattr(layer.router, "mean_router_entropy")
        assert not hasattr(layer, "last_routing")


def test_a_checkpoint_of_an_earlier_version_still_loads():
    """Earlier checkpoints hold ``prob_sums`` and ``routed_tokens`` and no ``step_counts``."""
    source = _model()
    _train_forward(source)
    state = collect_resume_state(source)
    for name, saved in state["routers"].items():
        experts = saved["load_counts"].numel()
        state["routers"][name] = {"load_counts": saved["load_counts"], "prob_sums": torch.rand(experts),
                                  "routed_tokens": torch.tensor(32.0)}
    target = _model()
    restore_resume_state(target, state)
    for (_, a), (_, b) in zip(source.named_modules(), target.named_modules()):
        if hasattr(a, "load_counts"):
            assert torch.equal(a.load_counts, b.load_counts) and a.load_counts.sum() > 0
            assert b.step_counts.sum() == 0


def test_this_steps_counts_survive_a_checkpoint():
    source = _model()
    _train_forward(source)  # a micro-batch of a step not yet ended by an optimizer step
    target = _model()
    restore_resume_state(target, collect_resume_state(source))
    for layer_a, layer_b in zip(source.moe_layers(), target.moe_layers()):
        assert torch.equal(layer_a.router.step_counts, layer_b.router.step_counts)
        assert layer_b.router.step_counts.sum() > 0
