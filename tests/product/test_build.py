"""One build function for every caller: kernels, then expert parallel, checkpointing, compile, FSDP2."""

from __future__ import annotations

import dataclasses

import pytest
import torch

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


def test_the_compile_mode_reaches_every_blocks_compile(monkeypatch):
    seen = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kwargs: seen.append(kwargs))
    build_model(tiny(), RuntimeConfig(compile=True, compile_mode="reduce-overhead"), "cpu")
    assert seen == [{"mode": "reduce-overhead"}] * tiny().num_layers
    seen.clear()
    build_model(tiny(), RuntimeConfig(compile=True), "cpu")  # torch's own default mode
    assert seen == [{}] * tiny().num_layers


def test_fp8_forward_creates_undtyped_tensors_in_fp32_under_bf16_true():
    """Lightning's bf16-true sets bf16 as the default dtype around the forward; under an FP8 recipe
    TE's scaling state must still be created in fp32, and the default is restored afterwards."""
    from biomoe.build import _fp32_default_dtype

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with _fp32_default_dtype(True):
            assert torch.zeros(1).dtype == torch.float32
        assert torch.zeros(1).dtype == torch.bfloat16
        with _fp32_default_dtype(False):  # bf16 runs keep Lightning's setting
            assert torch.zeros(1).dtype == torch.bfloat16
    finally:
        torch.set_default_dtype(previous)


def test_router_token_counts_stay_fp32_under_a_bf16_default():
    """301 tokens is not a bf16 number: the aux loss must not depend on the default dtype."""
    from biomoe.model.moe.router import TopKRouter

    torch.manual_seed(0)
    router = TopKRouter(8, 4, 2).float()
    hidden = torch.randn(301, 8)
    reference = router(hidden).aux_loss
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        aux = router(hidden).aux_loss
    finally:
        torch.set_default_dtype(previous)
    assert aux.dtype == torch.float32
    torch.testing.assert_close(aux, reference, rtol=0, atol=0)


def test_a_given_model_is_announced_and_run_with_its_own_kernels(monkeypatch):
    """The kernels line and the precision recipe of a model the caller built follow its layers,
    not the kernels ``runtime`` would have chosen (here: TE layers, as on a GPU with TE)."""
    import biomoe.backends.select as select
    from biomoe.model.transformer import MoETransformer

    monkeypatch.setattr(select, "te_usable", lambda device=None: True)
    lines: list[str] = []
    given = MoETransformer(tiny())  # plain torch layers, grouped experts
    built = build_model(tiny(), RuntimeConfig(expert_backend="loop"), "cpu", announce=lines.append, model=given)
    line = lines[-1]
    assert "norm=torch nn.RMSNorm" in line and "attention=torch SDPA" in line, line
    assert "router=torch" in line and "dispatch=torch argsort" in line and "experts=grouped" in line, line
    assert "te." not in line, line
    assert not built.selection.precision.use_te  # no te.autocast around layers that are not TE's
    assert built.selection.backends.experts == "grouped"


def test_a_given_model_built_as_selected_keeps_the_selection():
    from biomoe.backends.select import select_backends
    from biomoe.model.transformer import MoETransformer

    selection = select_backends(tiny(), RuntimeConfig(), torch.device("cpu"))
    built = build_model(tiny(), RuntimeConfig(), "cpu", model=MoETransformer(tiny(), selection.backends),
                        selection=selection)
    assert built.selection is selection


@pytest.mark.parametrize("mode", ["ep", "local"])
def test_bias_balancing_with_per_group_statistics_is_refused_in_one_line(mode):
    """With ``ep`` or ``local`` statistics each rank would move its copy of the replicated expert
    bias by its own load; the build refuses before anything is split or sharded."""
    from types import SimpleNamespace

    from biomoe.errors import ConfigError

    config = dataclasses.replace(tiny(), router_bias_update_rate=0.01)
    with pytest.raises(ConfigError) as info:
        build_model(config, RuntimeConfig(), "cpu", plan=SimpleNamespace(load_balancing=mode))
    message = str(info.value)
    assert "\n" not in message and "router_bias_update_rate" in message and mode in message
    assert "load_balancing: global" in message


def test_bias_balancing_with_global_statistics_or_per_group_aux_loss_is_accepted():
    from biomoe.build import check_bias_balancing

    check_bias_balancing("global", 0.01)
    check_bias_balancing("ep", 0.0)
    check_bias_balancing("local", 0.0)


def test_fit_refuses_bias_balancing_with_local_statistics_before_training(tmp_path, capsys):
    from biomoe.cli.main import main
    from conftest import ROOT, error_line

    code = main(["fit", "--config", str(ROOT / "configs/tiny.yaml"),
                 "--data.fasta", str(ROOT / "data/lambda_virus.fa.gz"),
                 "--trainer.default_root_dir", str(tmp_path), "--trainer.max_steps", "1",
                 "--trainer.strategy", "biomoe.parallel.strategy.ExpertParallelStrategy",
                 "--trainer.strategy.load_balancing", "local", "--model.config.router_bias_update_rate", "0.01"])
    assert code == 2
    line = error_line(capsys.readouterr().err)
    assert "router_bias_update_rate" in line and "load_balancing: global" in line, line
