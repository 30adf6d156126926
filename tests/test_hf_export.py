"""HF export/import: transformers loads the folder and gives biomoe's logits; import round-trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from biomoe.training.cli import main as cli_main  # noqa: E402
from biomoe.model.config import ConfigError, ModelConfig  # noqa: E402
from biomoe.interop.hf import export_hf, import_hf  # noqa: E402
from biomoe.inference.scoring import load_model  # noqa: E402
from biomoe.model.transformer import MoETransformer  # noqa: E402
from conftest import save_checkpoint  # noqa: E402


def write_ckpt(path: Path, cfg: ModelConfig, seed: int = 0, bias: bool = False) -> MoETransformer:
    torch.manual_seed(seed)
    model = MoETransformer(cfg)
    with torch.no_grad():  # non-trivial norms so a swapped norm name would show
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
        if bias:
            model.moe_layers()[0].router.expert_bias[0] = 0.1
    save_checkpoint(path, model, cfg)
    return model.eval()


def tiny_cfg(**kw) -> ModelConfig:
    args = dict(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                ffn_hidden_size=48, rope_theta=5000.0, norm_eps=1e-6)
    args.update(kw)
    return ModelConfig(**args)


@pytest.mark.parametrize("tie", [False, True])
def test_transformers_gives_biomoe_logits(tmp_path, tie):
    model = write_ckpt(tmp_path / "m.ckpt", tiny_cfg(tie_embeddings=tie))
    out = export_hf(tmp_path / "m.ckpt", tmp_path / "hf")
    assert {p.name for p in out.iterdir()} == {"config.json", "model.safetensors"}
    hf = transformers.MixtralForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert hf.config.rms_norm_eps == 1e-6 and hf.config.tie_word_embeddings is tie
    ids = torch.randint(4, 8, (3, 64), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = model(ids).logits
        theirs = hf(input_ids=ids).logits
    assert (ours - theirs).abs().max().item() < 1e-4
    assert ours.abs().max().item() > 0.01  # not trivially zero


def test_import_round_trips_weights_exactly(tmp_path):
    model = write_ckpt(tmp_path / "m.ckpt", tiny_cfg(), seed=3)
    export_hf(tmp_path / "m.ckpt", tmp_path / "hf")
    assert cli_main(["import-hf", str(tmp_path / "hf"), str(tmp_path / "back.ckpt")]) == 0
    back = load_model(tmp_path / "back.ckpt")
    assert back.config.rope_theta == 5000.0 and back.config.norm_eps == 1e-6
    original, restored = model.state_dict(), back.state_dict()
    assert original.keys() == restored.keys()
    for key in original:
        assert torch.equal(original[key], restored[key]), key


def test_import_reads_transformers_own_save(tmp_path):
    """A folder written by transformers' save_pretrained (whatever expert layout it uses) imports."""
    cfg = json.loads(json.dumps({"vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
                                 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                                 "num_local_experts": 4, "num_experts_per_tok": 2}))
    torch.manual_seed(0)
    hf = transformers.MixtralForCausalLM(transformers.MixtralConfig(**cfg)).eval()
    hf.save_pretrained(tmp_path / "hf")
    import_hf(tmp_path / "hf", tmp_path / "m.ckpt")
    ours = load_model(tmp_path / "m.ckpt")
    ids = torch.randint(4, 8, (2, 32), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (ours(ids).logits - hf(input_ids=ids).logits).abs().max().item() < 1e-4


def test_dense_layers_and_routing_bias_are_refused(tmp_path, capsys):
    write_ckpt(tmp_path / "d.ckpt", tiny_cfg(moe_layers=[1]))
    with pytest.raises(ConfigError, match=r"blocks \[0\] are dense"):
        export_hf(tmp_path / "d.ckpt", tmp_path / "hf")
    write_ckpt(tmp_path / "b.ckpt", tiny_cfg(router_bias_update_rate=0.01), bias=True)
    assert cli_main(["export-hf", str(tmp_path / "b.ckpt"), str(tmp_path / "hf2")]) == 2
    err = capsys.readouterr().err.strip()
    assert "routing bias" in err and len(err.splitlines()) == 1
