"""One build function for every caller: kernels, then expert parallel, checkpointing, compile, FSDP2."""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor

from biomoe.build import build_model
from biomoe.model.config import ModelConfig, RuntimeConfig


def tiny() -> ModelConfig:
    return ModelConfig(vocab_size=16, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                       num_experts=4, top_k=2, ffn_hidden_size=32)


def test_runtime_settings_are_applied_in_order_and_keep_state_dict_keys():
    plain = build_model(tiny(), RuntimeConfig(), "cpu").model
    built = build_model(tiny(), RuntimeConfig(expert_backend="loop", activation_checkpointing=True,
                                              compile=True), "cpu").model
    block = built.blocks[0]
    inner = block._checkpoint_wrapped_module  # checkpointing wraps the block...
    assert getattr(inner, "_compiled_call_impl", None) is not None  # ...and compile runs inside it
    assert inner.mlp.experts.backend_name == "loop"
    assert set(built.state_dict()) == set(plain.state_dict())


def test_expert_parallel_strategy_on_one_device_does_not_shard(tmp_path):
    """At world size 1 there is nothing to shard: the model must train as plain tensors (FSDP2 would
    only add a copy and cast of every parameter each step)."""
    import lightning as L

    from biomoe.model.config import OptimConfig
    from biomoe.parallel.strategy import ExpertParallelStrategy
    from biomoe.training.module import BioMoEModule

    module = BioMoEModule(tiny(), OptimConfig(warmup_steps=1, max_steps=2), log_expert_load_every_n_steps=0)
    ids = torch.randint(0, 16, (2, 17))
    batch = {"input_ids": ids[:, :-1], "labels": ids[:, 1:], "loss_mask": torch.ones(2, 16)}
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                        strategy=ExpertParallelStrategy(process_group_backend="gloo"))
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader([batch] * 2, batch_size=None))
    assert trainer.global_step == 2
    assert not any(isinstance(p, DTensor) for p in module.model.parameters())
