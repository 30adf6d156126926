"""HF export/import: transformers loads the folder and gives biomoe's logits; import round-trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from biomoe.cli.main import main as cli_main  # noqa: E402
from biomoe.model.config import ConfigError, ModelConfig  # noqa: E402
from biomoe.interop.hf import export_hf, import_hf  # noqa: E402
from biomoe.inference.load import load_model  # noqa: E402
from biomoe.model.transformer import MoETransformer  # noqa: E402
from biomoe.data.tokenizer import NucleotideTokenizer  # noqa: E402
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
    assert {p.name for p in out.iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json",
                                               "tokenizer_config.json", "generation_config.json", "README.md"}
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # no scratch files left behind
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


DNA_WITH_IUPAC = "ACGTNacgtnRYSWKMBDHVryswkmbdhv ACxGT\n"


def write_trained_ckpt(path: Path, cfg: ModelConfig, data: dict | None = None, step: int | None = 120,
                       score: float | None = 1.8919) -> Path:
    """A checkpoint as ``fit`` leaves it: data settings, a step count and ModelCheckpoint's state."""
    torch.manual_seed(0)
    save_checkpoint(path, MoETransformer(cfg), cfg, data=data)
    ckpt = torch.load(path, weights_only=False)
    if step is not None:
        ckpt["global_step"] = step
    if score is not None:
        ckpt["callbacks"] = {"ModelCheckpoint{'monitor': 'val/bits_per_base'}": {
            "monitor": "val/bits_per_base", "best_model_score": torch.tensor(score),
            "best_model_path": str(path), "best_k_models": {str(path): torch.tensor(score)}}}
    torch.save(ckpt, path)
    return path


@pytest.mark.parametrize("fold", [True, False])
def test_auto_tokenizer_gives_biomoe_ids(tmp_path, fold):
    write_trained_ckpt(tmp_path / "m.ckpt", tiny_cfg(), data={"fasta": ["g.fa"], "fold_lowercase": fold})
    out = export_hf(tmp_path / "m.ckpt", tmp_path / "hf")
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    ours = NucleotideTokenizer(fold_lowercase=fold)
    assert hf_tok("ACGTN")["input_ids"] == ours.encode("ACGTN", add_bos=True).tolist() == [1, 4, 5, 6, 7, 8]
    ids = hf_tok(DNA_WITH_IUPAC)["input_ids"]
    assert ids == ours.encode(DNA_WITH_IUPAC, add_bos=True).tolist()
    assert (ids.count(ours.unk_id) > 3) is not fold  # lower case is <unk> only when training read it so
    assert hf_tok.decode(hf_tok("ACGTNRYSWKMBDHV")["input_ids"], skip_special_tokens=True) == "ACGTNRYSWKMBDHV"
    card = (out / "README.md").read_text()
    assert ("lower-case bases are read as upper case" in card) is fold


def test_generate_from_prompt_emits_only_bases(tmp_path):
    write_trained_ckpt(tmp_path / "m.ckpt", tiny_cfg(), data={"fasta": ["g.fa"], "seq_length": 256})
    out = export_hf(tmp_path / "m.ckpt", tmp_path / "hf")
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert isinstance(model, transformers.MixtralForCausalLM)
    assert model.generation_config.do_sample and model.generation_config.max_new_tokens == 256
    prompts = ["ACGTTGCA", "ggatcc"]
    prompt = tokenizer(prompts, return_tensors="pt", padding=True)  # left-padded: both end where sampling starts
    assert prompt["input_ids"][1].tolist()[:3] == [0, 0, 1]
    torch.manual_seed(0)
    generated = model.generate(**prompt, max_new_tokens=64)
    assert generated.shape == (2, prompt["input_ids"].shape[1] + 64)
    assert torch.equal(generated[:, :prompt["input_ids"].shape[1]], prompt["input_ids"])
    for text, row in zip(prompts, tokenizer.batch_decode(generated, skip_special_tokens=True)):
        assert row[:len(text)] == text.upper() and len(row) == len(text) + 64 and set(row) <= set("ACGT"), row
    # without the suppressed ids the padded vocabulary and the special tokens would be sampled too
    torch.manual_seed(0)
    unmasked = model.generate(**prompt, max_new_tokens=64, suppress_tokens=None)
    assert not set(unmasked[:, prompt["input_ids"].shape[1]:].flatten().tolist()) <= {4, 5, 6, 7}


def test_model_card_records_training(tmp_path):
    data = {"fasta": ["genomes/ecoli.fa.gz", "genomes/phage.fa"], "seq_length": 512, "val_fraction": 0.1,
            "test_files": ["genomes/phage.fa"]}
    write_trained_ckpt(tmp_path / "m.ckpt", tiny_cfg(), data=data, step=120, score=1.8919)
    card = (export_hf(tmp_path / "m.ckpt", tmp_path / "hf") / "README.md").read_text()
    assert "MixtralForCausalLM" in card and "4 experts per layer" in card and "2 active per token" in card
    assert "`ecoli.fa.gz`" in card and "`phage.fa`" in card and "512 bases" in card
    assert "steps: 120" in card and "1.8919" in card and "AutoModelForCausalLM" in card

    write_trained_ckpt(tmp_path / "bare.ckpt", tiny_cfg(), data=None, step=None, score=None)
    card = (export_hf(tmp_path / "bare.ckpt", tmp_path / "hf2") / "README.md").read_text()
    assert "steps: not recorded" in card and "bits/base (`val/bits_per_base`): not recorded" in card
    assert "training data: not recorded" in card


def test_export_never_writes_over_its_input(tmp_path, capsys):
    folder = tmp_path / "hf"
    folder.mkdir()
    ckpt = write_trained_ckpt(folder / "tokenizer.json", tiny_cfg())  # a checkpoint named like an output
    before = ckpt.read_bytes()
    assert cli_main(["export-hf", str(ckpt), str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert "is also an input" in err and len(err.splitlines()) == 1
    assert ckpt.read_bytes() == before and sorted(p.name for p in folder.iterdir()) == ["tokenizer.json"]


def test_export_takes_context_and_score_from_the_run(tmp_path):
    """max_position_embeddings is the training length; a best-* checkpoint whose own callback state
    predates its score gets it from the run's later checkpoint (last.ckpt)."""
    from biomoe.checkpoint.run_folder import MONITOR

    cfg = tiny_cfg()
    torch.manual_seed(0)
    model = MoETransformer(cfg)
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    best = folder / "best-step40-val1.9000.ckpt"
    weights = {f"model.{k}": v for k, v in model.state_dict().items()}
    key = "ModelCheckpoint{'monitor': '%s', 'mode': 'min'}" % MONITOR
    common = {"state_dict": weights, "hyper_parameters": {"config": cfg},
              "datamodule_hyper_parameters": {"seq_length": 128, "fasta": ["g.fa"]}, "global_step": 40}
    torch.save({**common, "callbacks": {key: {"monitor": MONITOR, "best_k_models": {}}}}, best)
    torch.save({**common, "global_step": 60,
                "callbacks": {key: {"monitor": MONITOR, "best_model_path": str(best), "best_model_score": 1.9,
                                    "best_k_models": {str(best): 1.9}}}}, folder / "last.ckpt")
    out = export_hf(best, tmp_path / "hf")
    assert json.loads((out / "config.json").read_text())["max_position_embeddings"] == 128
    card = (out / "README.md").read_text()
    (line,) = [line for line in card.splitlines() if "held-out bits/base" in line]
    assert "1.9000" in line and "this checkpoint" in line


def test_a_round_trip_scores_exactly_as_the_original_with_default_windows(tmp_path):
    """The export records the training length; import writes it back, so every command reads the
    imported weights in the windows it read the original in, and scores do not move."""
    from biomoe.checkpoint.records import training_seq_length

    cfg = tiny_cfg()
    torch.manual_seed(0)
    model = MoETransformer(cfg)
    weights = {f"model.{k}": v for k, v in model.state_dict().items()}
    torch.save({"state_dict": weights, "hyper_parameters": {"config": cfg},
                "datamodule_hyper_parameters": {"seq_length": 96, "fasta": ["g.fa"]}}, tmp_path / "m.ckpt")
    export_hf(tmp_path / "m.ckpt", tmp_path / "hf")
    assert cli_main(["import-hf", str(tmp_path / "hf"), str(tmp_path / "back.ckpt")]) == 0
    assert training_seq_length(tmp_path / "back.ckpt") == 96
    genome = tmp_path / "g.fa"
    rng = torch.Generator().manual_seed(2)
    genome.write_text(">c\n" + "".join("ACGT"[i] for i in torch.randint(0, 4, (700,), generator=rng)) + "\n")
    rows = []
    for name in ("m", "back"):
        assert cli_main(["score-fasta", str(tmp_path / f"{name}.ckpt"), str(genome), "--out",
                         str(tmp_path / f"scores-{name}")]) == 0
        rows.append((tmp_path / f"scores-{name}.tsv").read_text())
    assert rows[0] == rows[1]


def test_a_foreign_mixtral_records_no_training_length(tmp_path):
    """Another model's max_position_embeddings is what it accepts, not what it was trained on."""
    from biomoe.checkpoint.records import training_seq_length

    cfg = tiny_cfg()
    torch.manual_seed(0)
    torch.save({"state_dict": {f"model.{k}": v for k, v in MoETransformer(cfg).state_dict().items()},
                "hyper_parameters": {"config": cfg}, "datamodule_hyper_parameters": {"seq_length": 96}},
               tmp_path / "m.ckpt")
    export_hf(tmp_path / "m.ckpt", tmp_path / "hf")
    (tmp_path / "hf" / "tokenizer.json").unlink()  # no tokenizer of biomoe's: a foreign folder
    with pytest.warns(UserWarning, match="not biomoe's vocabulary"):
        import_hf(tmp_path / "hf", tmp_path / "back.ckpt")
    assert training_seq_length(tmp_path / "back.ckpt") is None
