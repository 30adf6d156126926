"""Compiled MoE blocks on CUDA that train at a second sequence length get one warning naming the
known fault; every other setup, and a fit at one length, gets none."""

from __future__ import annotations

import pytest
import torch

from biomoe.model.config import ModelConfig, RuntimeConfig
from biomoe.training.step.lightning_module import BioMoEModule
from biomoe.training.step.sequence_lengths import SequenceLengthWatch, watches_sequence_lengths


def _config(experts: int) -> ModelConfig:
    return ModelConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=experts,
                       top_k=1, ffn_hidden_size=32)


def test_only_compiled_moe_blocks_on_cuda_are_watched():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert watches_sequence_lengths(_config(4), RuntimeConfig(compile=True), cuda)
    assert not watches_sequence_lengths(_config(4), RuntimeConfig(compile=False), cuda)
    assert not watches_sequence_lengths(_config(1), RuntimeConfig(compile=True), cuda)
    assert not watches_sequence_lengths(_config(4), RuntimeConfig(compile=True), cpu)


def test_a_second_length_is_named_once_and_a_repeated_length_never():
    watch = SequenceLengthWatch(active=True)
    assert [watch.see(n) for n in (1024, 1024, 1024)] == [None, None, None]
    message = watch.see(512)
    assert message is not None and "512 after 1,024" in message and "--model.runtime.compile false" in message
    assert "docs/reliability.md" in message
    assert watch.see(256) is None and watch.see(1024) is None  # said once
    assert SequenceLengthWatch(active=False).see(1) is None


def test_the_training_step_warns_when_its_batches_change_length(monkeypatch):
    module = BioMoEModule(_config(4))
    module.configure_model()
    module._lengths = SequenceLengthWatch(active=True)  # as on CUDA with compile; the step runs here on the CPU
    monkeypatch.setattr(module, "log", lambda *a, **k: None)
    monkeypatch.setattr(module, "log_dict", lambda *a, **k: None)
    monkeypatch.setattr(type(module), "trainer", property(lambda self: type("T", (), {"world_size": 1})()))
    batch = {"input_ids": torch.randint(4, 8, (2, 16)), "labels": torch.randint(4, 8, (2, 16)),
             "loss_mask": torch.ones(2, 16, dtype=torch.bool)}
    module.training_step(batch, 0)
    short = {k: v[:, :8] for k, v in batch.items()}
    with pytest.warns(UserWarning, match="sequence length 8 after 16"):
        module.training_step(short, 1)
