"""The checkpoint package: one reader, one hyper-parameter → ModelConfig step, optimizer layouts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from biomoe.checkpoint.hparams import model_config_from, recorded_model_config
from biomoe.checkpoint.optimizer_state import portable_to_te, te_to_portable
from biomoe.checkpoint.read import read_checkpoint, read_checkpoint_or_none
from biomoe.checkpoint.records import training_data_settings, training_seq_length
from biomoe.errors import GenomeInputError
from biomoe.model.config import ConfigError, ModelConfig


def _te_state() -> dict:
    """A FusedAdam-shaped state dict: TE names the master ``master_param`` and counts steps per group."""
    return {"param_groups": [{"lr": 1e-3, "step": 7, "params": [0, 1]}, {"lr": 2e-3, "step": 3, "params": [2]}],
            "state": {i: {"master_param": torch.full((2,), float(i)), "exp_avg": torch.ones(2) * i,
                          "exp_avg_sq": torch.ones(2)} for i in range(3)}}


def test_te_layout_round_trips_through_the_portable_one() -> None:
    portable = te_to_portable(_te_state())
    assert all("step" not in g for g in portable["param_groups"])
    assert set(portable["state"][0]) == {"master", "exp_avg", "exp_avg_sq", "step"}
    assert [float(portable["state"][i]["step"]) for i in range(3)] == [7.0, 7.0, 3.0]
    own = [{"lr": 0.0, "bias_correction": True, "params": [0, 1]}, {"lr": 0.0, "bias_correction": True, "params": [2]}]
    back = portable_to_te(portable, own)
    assert [g["step"] for g in back["param_groups"]] == [7, 3]
    assert [g["lr"] for g in back["param_groups"]] == [1e-3, 2e-3]  # the saved settings win
    assert all(g["bias_correction"] for g in back["param_groups"])  # TE's own settings are kept
    for i in range(3):
        assert torch.equal(back["state"][i]["master_param"], torch.full((2,), float(i)))
        assert "step" not in back["state"][i] and "master" not in back["state"][i]


def test_model_config_from_dataclass_dict_and_unknown_keys() -> None:
    cfg = ModelConfig(hidden_size=64, num_layers=2, num_heads=4)
    assert model_config_from(cfg) == cfg
    assert model_config_from({**dataclasses.asdict(cfg), "a_newer_field": 1}) == cfg
    assert model_config_from(None) == ModelConfig()
    with pytest.raises(ConfigError):
        model_config_from({"num_heads": 0})


def test_recorded_model_config_names_the_checkpoint() -> None:
    assert recorded_model_config("m.ckpt", {"hyper_parameters": {}}) is None
    with pytest.raises(GenomeInputError, match="m.ckpt.*recorded model config is invalid"):
        recorded_model_config("m.ckpt", {"hyper_parameters": {"config": {"num_heads": 0}}})
    with pytest.raises(GenomeInputError, match="not a model config"):
        recorded_model_config("m.ckpt", {"hyper_parameters": {"config": [1, 2]}})


def test_read_checkpoint_and_records(tmp_path: Path) -> None:
    path = tmp_path / "m.ckpt"
    torch.save({"state_dict": {}, "datamodule_hyper_parameters": {"seq_length": 128, "_private": 1}}, path)
    assert read_checkpoint(path)["datamodule_hyper_parameters"]["seq_length"] == 128
    assert training_data_settings(path) == {"seq_length": 128}
    assert training_seq_length(path) == 128
    assert training_data_settings(tmp_path) == {} and read_checkpoint_or_none(tmp_path / "absent.ckpt") is None
    broken = tmp_path / "broken.ckpt"
    broken.write_bytes(b"\x80not a pickle")
    with pytest.raises(GenomeInputError, match="broken.ckpt.*cannot load checkpoint"):
        read_checkpoint(broken)
    assert read_checkpoint_or_none(broken) is None


def test_master_remainders_join_and_split_bit_exactly() -> None:
    from biomoe.checkpoint.optimizer_state import join_master, split_master

    gen = torch.Generator().manual_seed(0)
    master = torch.randn(50_000, generator=gen) * torch.exp(torch.randn(50_000, generator=gen) * 8)
    specials = torch.tensor([0.0, -0.0, 1.0, -1.0, float("inf"), -float("inf"), 1e-40, -3e38])
    master = torch.cat([master, specials])
    weight, remainder = split_master(master)
    assert weight.dtype == torch.bfloat16 and remainder.dtype == torch.int16
    assert torch.equal(join_master(weight, remainder).view(torch.int32), master.view(torch.int32))
    finite = torch.isfinite(master)
    nearest = master.to(torch.bfloat16).float()
    # the weight is a nearest bf16 of the master (the same as torch's rounding away from ties)
    assert torch.all((weight.float() - master).abs()[finite] <= (nearest - master).abs()[finite])
    ties = torch.tensor([0x3F808000, 0x3F818000, -0x3FFF8000], dtype=torch.int32).view(torch.float32)
    tie_weights, _ = split_master(ties)
    assert tie_weights.float().abs().tolist() == [1.0078125, 1.015625, 2.015625]  # ties away from zero
    with pytest.raises(TypeError, match="fp32 master"):
        split_master(master.to(torch.bfloat16))
