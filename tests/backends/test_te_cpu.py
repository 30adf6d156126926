"""CPU-side parts of the TE fast path: precision names, the start-up capability message,
the ``auto`` rule, padding arithmetic, and that everything degrades to torch without TE/CUDA."""

from __future__ import annotations

import pytest
import torch

from biomoe.model.backends import LayerBackends
from biomoe.model.config import ConfigError, ModelConfig, RuntimeConfig
from biomoe.backends.te.availability import DeviceInfo
from biomoe.backends.te.experts import GroupPadding, choose_expert_backend, interleave_glu_rows
from biomoe.backends.te.precision import (PRECISIONS, parse_precision, resolve_precision,
                                 supported_precisions)

H200 = DeviceInfo("NVIDIA H200", (9, 0))
B200 = DeviceInfo("NVIDIA B200", (10, 0))
L40 = DeviceInfo("NVIDIA L40S", (8, 9))


def every_recipe_ok(name: str) -> tuple[bool, str]:
    return True, ""


@pytest.mark.parametrize("raw,want", [("bf16", "bf16"), ("FP8-Current", "fp8-current"),
                                      ("fp8_block", "fp8-block"), ("mxfp8", "mxfp8")])
def test_parse_precision_normalises(raw, want):
    assert parse_precision(raw) == want


def test_unknown_precision_is_a_config_error():
    with pytest.raises(ConfigError, match="fp16"):
        parse_precision("fp16")
    with pytest.raises(ConfigError, match="model.runtime.precision"):
        RuntimeConfig(precision="int8")


def test_the_precision_is_parsed_once_where_the_config_reads_it(monkeypatch):
    """RuntimeConfig stores the canonical name; the backend choice, the capability check and the
    recipe read it as it is, so a spelling is never parsed a second time downstream."""
    import biomoe.backends.select as select
    import biomoe.backends.te.precision as te_precision

    runtime = RuntimeConfig(precision="FP8_Current", precision_fallback="BF16")
    assert (runtime.precision, runtime.precision_fallback) == ("fp8-current", "bf16")

    def parsed_again(*args, **kwargs):
        raise AssertionError(f"precision parsed again: {args}")

    monkeypatch.setattr(te_precision, "parse_precision", parsed_again)
    monkeypatch.setattr(select, "parse_precision", parsed_again, raising=False)
    assert select.may_use_te(runtime)
    selection = select.select_backends(ModelConfig(), runtime, torch.device("cpu"))
    assert selection.precision.name == "bf16" and selection.precision.recipe is None  # the fallback, no TE


@pytest.mark.parametrize("key", ["precision", "precision_fallback"])
def test_an_unknown_precision_is_one_line_naming_its_key(key):
    with pytest.raises(ConfigError) as err:
        RuntimeConfig(**{key: "fp16"})
    message = str(err.value)
    assert message.startswith(f"model.runtime.{key}: 'fp16' is unknown; choose one of bf16, ") and "\n" not in message


def test_supported_precisions_follow_capability():
    assert supported_precisions(H200, True, every_recipe_ok) == [
        "bf16", "fp8-delayed", "fp8-current", "fp8-block"]
    assert "mxfp8" in supported_precisions(B200, True, every_recipe_ok)
    assert supported_precisions(L40, True, every_recipe_ok) == ["bf16", "fp8-delayed", "fp8-current"]
    assert supported_precisions(None, False) == ["bf16"]
    assert supported_precisions(H200, False) == ["bf16"]  # no TE: only the torch path


def test_te_checker_has_the_last_word():
    def no_block(name):
        return (name != "fp8-block"), "cuBLAS too old"

    assert "fp8-block" not in supported_precisions(H200, True, no_block)


def test_mxfp8_on_hopper_is_one_line_naming_gpu_capability_and_alternatives():
    with pytest.raises(ConfigError) as err:
        resolve_precision("mxfp8", None, H200, True, every_recipe_ok)
    msg = str(err.value)
    assert "\n" not in msg
    assert "NVIDIA H200" in msg and "9.0" in msg
    assert "bf16, fp8-delayed, fp8-current, fp8-block" in msg


def test_fallback_is_used_and_logged(caplog):
    with caplog.at_level("WARNING"):
        assert resolve_precision("nvfp4", "fp8-current", H200, True, every_recipe_ok) == "fp8-current"
    assert "fallback" in caplog.text and "nvfp4" in caplog.text


def test_fallback_that_cannot_run_either_still_fails():
    with pytest.raises(ConfigError, match="fallback"):
        resolve_precision("nvfp4", "mxfp8", H200, True, every_recipe_ok)


def test_fp8_without_gpu_fails_unless_fallback():
    with pytest.raises(ConfigError, match="no CUDA GPU"):
        resolve_precision("fp8-current", None, None, False)
    assert resolve_precision("fp8-current", "bf16", None, False) == "bf16"


def test_alignment_table_matches_te_quantisation_tiles():
    assert {n: s.alignment for n, s in PRECISIONS.items()} == {
        "bf16": 1, "fp8-delayed": 16, "fp8-current": 16, "fp8-block": 16, "mxfp8": 32, "nvfp4": 128}


@pytest.mark.parametrize("info,te,precision,want", [
    (None, False, "bf16", "grouped"),
    (H200, False, "bf16", "grouped"),
    (H200, True, "bf16", "grouped"),
    (H200, True, "fp8-current", "te_fused"),  # measured: te.ops path beats te GroupedLinear on H200
    (H200, True, "fp8-delayed", "te_fused"),
    (B200, True, "mxfp8", "te_fused"),
    (B200, True, "fp8-current", "te"),
])
def test_auto_rule(info, te, precision, want):
    name, reason = choose_expert_backend(info, te, precision, hidden=1024, ffn=2816)
    assert name == want and reason


def test_group_padding_places_rows_and_zero_fills():
    counts = [3, 0, 17, 16]
    pad = GroupPadding(torch.tensor(counts, dtype=torch.int32), 16)
    assert pad.padded_counts == [16, 0, 32, 16]
    assert pad.padded_splits.dtype == torch.int64 and pad.padded_splits.tolist() == pad.padded_counts
    rows = torch.arange(1, sum(counts) + 1, dtype=torch.float32).unsqueeze(-1)
    padded = pad.pad(rows)
    assert padded.shape[0] == 64
    assert padded[:3, 0].tolist() == [1, 2, 3] and padded[3:16].abs().sum() == 0
    assert padded[16:33, 0].tolist() == list(range(4, 21)) and padded[33:48].abs().sum() == 0
    assert torch.equal(pad.unpad(padded), rows)


def test_interleave_matches_te_block_layout():
    e, f, h, b = 1, 64, 2, 32
    gate = torch.arange(f).float().view(1, f, 1).expand(e, f, h)
    up = (1000 + torch.arange(f)).float().view(1, f, 1).expand(e, f, h)
    inter = interleave_glu_rows(torch.cat([gate, up], dim=1), b)[0, :, 0].tolist()
    assert inter[:b] == list(range(b)) and inter[b:2 * b] == [1000 + i for i in range(b)]
    assert inter[2 * b:3 * b] == list(range(b, 2 * b))


def test_build_on_cpu_keeps_torch_paths_and_state_dict():
    from biomoe.build import build_model
    from biomoe.model.transformer import MoETransformer

    cfg = ModelConfig(vocab_size=16, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                      num_experts=4, top_k=2, ffn_hidden_size=64)
    runtime = RuntimeConfig(expert_backend="auto")
    built = build_model(cfg, runtime, torch.device("cpu"))
    assert set(built.model.state_dict()) == set(MoETransformer(cfg).state_dict())
    assert built.selection.paths["experts"].startswith("grouped")
    assert built.model.blocks[0].mlp.experts.backend_name == "grouped"
    assert runtime.expert_backend == "auto"  # the settings (and saved hparams) keep "auto"
    with built.autocast():
        out = built.model(torch.randint(0, 16, (2, 8)))
    assert out.logits.shape == (2, 8, 16)


def test_asking_for_te_on_cpu_is_a_config_error():
    from biomoe.build import build_model

    cfg = ModelConfig(vocab_size=16, hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2,
                      num_experts=4, top_k=2, ffn_hidden_size=64)
    with pytest.raises(ConfigError, match="model.runtime.attention_backend: te needs"):
        build_model(cfg, RuntimeConfig(attention_backend="te"), torch.device("cpu"))


def test_routed_experts_follow_the_routing_map_when_a_weight_underflows():
    """A diverging router: token 0's second routed expert (3) has weight 0.0, tied with the
    unrouted ones. The ids must still be the map's, or the dispatcher's counts and rows disagree."""
    from biomoe.backends.te.router import routed_experts

    dense = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.6, 0.4, 0.0]])
    routing_map = torch.tensor([[True, False, False, True], [False, True, True, False]])
    weights, ids = routed_experts(dense, routing_map, top_k=2)
    assert [sorted(row) for row in ids.tolist()] == [[0, 3], [1, 2]]
    torch.testing.assert_close(weights, dense.gather(1, ids))
    mask = torch.zeros_like(routing_map).scatter_(1, ids, True)
    assert torch.equal(mask, routing_map)  # counts from the map == counts from the ids


def test_counts_follow_the_ids_when_a_diverged_row_breaks_the_map():
    """NaN logits can leave a routing-map row with 0 or 3 trues. The ids are still top_k distinct
    experts per row, and the counts the padded permute uses must be taken from them."""
    from biomoe.model.moe.router import expert_counts
    from biomoe.backends.te.router import routed_experts

    dense = torch.tensor([[float("nan")] * 4, [0.5, 0.3, 0.2, 0.0], [0.0, 0.6, 0.4, 0.0]])
    routing_map = torch.tensor([[False] * 4, [True, True, True, False], [False, True, True, False]])
    _, ids = routed_experts(dense, routing_map, top_k=2)
    assert all(len(set(row)) == 2 for row in ids.tolist())
    counts = expert_counts(ids, 4)
    assert int(counts.sum()) == 3 * 2 and not torch.equal(counts, routing_map.sum(0))
    mask = torch.zeros_like(routing_map).scatter_(1, ids, True)
    assert torch.equal(mask.sum(0), counts)  # what the dispatcher builds from the ids


class _FakeTE:
    """Stands in for TE's FP8 state and checkpoint so the CPU can check which checkpoint runs."""

    def __init__(self, enabled: bool):
        import types

        self.calls = []
        self.quantization = types.ModuleType("transformer_engine.pytorch.quantization")
        self.quantization.FP8GlobalStateManager = type(
            "FP8GlobalStateManager", (), {"is_fp8_enabled": staticmethod(lambda: enabled)})
        self.distributed = types.ModuleType("transformer_engine.pytorch.distributed")

        def checkpoint(function, *args, use_reentrant=True, **kwargs):
            # TE falls back to torch's checkpoint for an nn.Module in which it finds none of its
            # layer classes, and ours are not submodules: the block must arrive as a plain callable.
            self.calls.append((use_reentrant, sorted(kwargs), isinstance(function, torch.nn.Module)))
            return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=use_reentrant, **kwargs)

        self.distributed.checkpoint = checkpoint

    def install(self, monkeypatch):
        monkeypatch.setitem(__import__("sys").modules, "transformer_engine.pytorch.quantization", self.quantization)
        monkeypatch.setitem(__import__("sys").modules, "transformer_engine.pytorch.distributed", self.distributed)


@pytest.mark.parametrize("fp8", [True, False])
def test_activation_checkpointing_recomputes_through_te_under_an_fp8_recipe(monkeypatch, fp8):
    """Under FP8 the blocks must recompute through TE's checkpoint (it re-enters the recipe),
    non-reentrant and with no torch-only keyword leaking into the block; otherwise torch's."""
    from biomoe.model.activation_checkpointing import apply_activation_checkpointing
    from biomoe.model.transformer import MoETransformer

    fake = _FakeTE(enabled=fp8)
    fake.install(monkeypatch)
    cfg = ModelConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                      num_experts=4, top_k=2, ffn_hidden_size=64, dropout=0.1)
    torch.manual_seed(0)
    loop = LayerBackends(experts="loop")
    plain, wrapped = MoETransformer(cfg, loop), MoETransformer(cfg, loop)
    wrapped.load_state_dict(plain.state_dict())
    apply_activation_checkpointing(wrapped)
    ids = torch.randint(4, 8, (2, 16))
    grads = []
    for model in (plain, wrapped):
        torch.manual_seed(1)
        model(ids).logits.float().pow(2).mean().backward()
        grads.append({n.replace("_checkpoint_wrapped_module.", ""): p.grad for n, p in model.named_parameters()})
    assert fake.calls == ([(False, [], False)] * cfg.num_layers if fp8 else [])
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, rtol=1e-5, atol=1e-6)


def test_activation_checkpointing_refuses_delayed_scaling_in_one_line():
    from biomoe.model.activation_checkpointing import check_precision_for_checkpointing

    with pytest.raises(ConfigError, match="fp8-delayed") as info:
        check_precision_for_checkpointing("fp8-delayed")
    assert "\n" not in str(info.value) and "fp8-block" in str(info.value)
    for ok in ("bf16", "fp8-current", "fp8-block", "mxfp8"):
        check_precision_for_checkpointing(ok)


@pytest.mark.parametrize("compiled,te_layers", [(False, True), (True, False)])
def test_auto_layers_take_te_unless_the_blocks_are_compiled_in_bf16(monkeypatch, compiled, te_layers):
    """Compiled bf16 blocks ran faster on torch's layers than on TE's (the compiler breaks its graph
    at each TE call), so ``auto`` gives them torch; without compile ``auto`` is TE where usable."""
    import biomoe.backends.select as select

    monkeypatch.setattr(select, "te_usable", lambda device=None: True)  # as on a GPU with TE installed
    runtime = RuntimeConfig(compile=compiled, expert_backend="grouped")
    assert select.may_use_te(runtime) is te_layers  # compiled bf16: TE is not even probed
    selection = select.select_backends(ModelConfig(), runtime, torch.device("cpu"))
    paths = selection.paths
    assert (paths["norm"] == "te.RMSNorm") is te_layers
    assert (paths["attention"] == "te.DotProductAttention") is te_layers
    assert paths["router"].startswith("te") is te_layers and paths["dispatch"].startswith("te") is te_layers
    assert selection.precision.use_te is te_layers
    assert ("layers" in paths) is not te_layers  # the kernels line says why auto chose torch


def test_compiled_blocks_keep_te_layers_when_asked_or_under_an_fp8_recipe(monkeypatch):
    import biomoe.backends.select as select

    monkeypatch.setattr(select, "te_usable", lambda device=None: True)
    assert select.auto_layers_take_te(RuntimeConfig(compile=True, precision="fp8-current"))
    assert not select.auto_layers_take_te(RuntimeConfig(compile=True))
    asked = RuntimeConfig(compile=True, expert_backend="grouped", norm_backend="te")
    assert select.may_use_te(asked)
    paths = select.select_backends(ModelConfig(), asked, torch.device("cpu")).paths
    assert paths["norm"] == "te.RMSNorm" and paths["attention"] == "torch SDPA"


@pytest.mark.parametrize("align", [16, 32, 128])
def test_group_padding_matches_a_per_expert_reference(align):
    gen = torch.Generator().manual_seed(align)
    for _ in range(20):
        counts = torch.randint(0, 3 * align, (8,), generator=gen)
        counts[torch.randint(0, 8, (2,), generator=gen)] = 0  # empty experts too
        pad = GroupPadding(counts, align)
        rows = torch.randn(int(counts.sum()), 3, generator=gen)
        want, start = [], 0
        for c in counts.tolist():
            block = torch.zeros(-(-c // align) * align, 3)
            block[:c] = rows[start:start + c]
            want.append(block)
            start += c
        assert torch.equal(pad.pad(rows), torch.cat(want))
        assert torch.equal(pad.unpad(pad.pad(rows)), rows)
