"""The kernels line says when ``grouped`` experts will run as the per-expert loop, and its cost."""

from __future__ import annotations

import logging

import pytest
import torch

import biomoe.backends.select as select
from biomoe.backends.te.availability import DeviceInfo
from biomoe.model.config import ModelConfig, RuntimeConfig
from biomoe.model.moe.experts import Experts


def _line(config: ModelConfig, trainer_precision: str | None, device: str = "cpu") -> str:
    selection = select.select_backends(config, RuntimeConfig(expert_backend="grouped"), torch.device(device))
    return selection.summary(trainer_precision)


def test_unaligned_sizes_are_announced_as_the_loop_with_its_sync():
    line = _line(ModelConfig(hidden_size=32, ffn_hidden_size=30), "32-true")
    assert "experts=grouped" in line and "falls back to the per-expert loop" in line, line
    assert "sync" in line and "ffn 30" in line, line


def test_the_line_is_right_about_what_runs(caplog):
    """The same shapes run as the loop (the backend logs it) exactly when the line says so."""
    for ffn in (30, 32):
        config = ModelConfig(hidden_size=32, ffn_hidden_size=ffn)
        experts = Experts(2, 32, ffn, backend="grouped")
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            experts(torch.randn(4, 32), torch.tensor([1, 3]))
        ran_loop = any("per-expert loop" in r.getMessage() for r in caplog.records)
        assert ran_loop == ("per-expert loop" in _line(config, "32-true")), ffn
    assert ran_loop is False  # the aligned case runs grouped


@pytest.mark.parametrize("capability,precision,falls_back", [((9, 0), "bf16-true", False),
                                                             ((9, 0), "bf16-mixed", False),
                                                             ((9, 0), "32-true", True),
                                                             ((8, 0), "bf16-true", True)])
def test_on_a_gpu_grouped_needs_bf16_on_hopper(monkeypatch, capability, precision, falls_back):
    monkeypatch.setattr(select, "device_info", lambda device=None: DeviceInfo("GPU", capability))
    monkeypatch.setattr(select, "te_usable", lambda device=None: False)
    line = _line(ModelConfig(), precision, "cuda")
    assert ("falls back to the per-expert loop" in line) is falls_back, line


def test_without_a_trainer_precision_nothing_is_guessed():
    assert "per-expert loop" not in _line(ModelConfig(hidden_size=32, ffn_hidden_size=30), None)
