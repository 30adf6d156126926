"""Export a biomoe checkpoint as a transformers ``MixtralForCausalLM`` folder, and import one back.

The export is a complete folder: weights and config, a tokenizer with biomoe's ids, sampling
defaults that emit only bases, and a model card (see :mod:`biomoe.interop.hf_tokenizer` and
:mod:`biomoe.interop.model_card`).

biomoe's weights already use Mixtral's conventions (rotate-half RoPE, gate-then-up SwiGLU, softmax →
top-k → renormalise routing, pre-norm RMSNorm), so conversion is a renaming plus a config. The
experts are written in the per-expert ``block_sparse_moe.experts.{j}.w1/w2/w3`` layout of the
published Mixtral checkpoints: transformers 4.x reads it directly and 5.x converts it on load into
its fused ``mlp.experts.gate_up_proj``/``down_proj`` (which is our layout); import accepts both.

What does not map is refused with a one-line :class:`~biomoe.model.config.ConfigError`: dense blocks
(Mixtral is MoE in every layer) and a non-zero aux-loss-free routing bias (Mixtral routes by the
softmax alone, so the exported model would route differently).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import lightning
import torch
from torch import Tensor

from biomoe.model.config import ConfigError, ModelConfig, OptimConfig
from biomoe.errors import GenomeInputError
from biomoe.output_checks import check_outputs
from biomoe.output_set import commit_together
from biomoe.checkpoint.verify import check_finite
from biomoe.checkpoint.save import atomic_torch_save
from biomoe.checkpoint.run_folder import resolve_checkpoint
from biomoe.inference.load import load_model
from biomoe.model.transformer import MoETransformer
from biomoe.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from biomoe.interop.hf_tokenizer import generation_config_text, tokenizer_files, vocabulary_difference
from biomoe.interop.model_card import model_card, training_record

__all__ = ["export_hf", "import_hf", "to_hf_state_dict", "from_hf_state_dict", "hf_config"]

_LAYER_RENAMES = {  # biomoe block suffix -> HF decoder-layer suffix (plain tensors)
    "attn_norm.weight": "input_layernorm.weight",
    "mlp_norm.weight": "post_attention_layernorm.weight",
    "attn.q_proj.weight": "self_attn.q_proj.weight",
    "attn.k_proj.weight": "self_attn.k_proj.weight",
    "attn.v_proj.weight": "self_attn.v_proj.weight",
    "attn.o_proj.weight": "self_attn.o_proj.weight",
    "mlp.router.gate.weight": "block_sparse_moe.gate.weight",
}
_EXPORTED_FILES = ("model.safetensors", "config.json", "generation_config.json", "README.md",
                   "tokenizer.json", "tokenizer_config.json")
_TOP_RENAMES = {"embed.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
                "lm_head.weight": "lm_head.weight"}


def check_exportable(model: MoETransformer) -> None:
    """Refuse what MixtralForCausalLM cannot represent (one actionable line)."""
    cfg = model.config
    if cfg.shared_expert_size:
        raise ConfigError("cannot export to MixtralForCausalLM: model.config.shared_expert_size is "
                          f"{cfg.shared_expert_size}, and Mixtral has no shared expert")
    dense = [i for i in range(cfg.num_layers) if i not in set(cfg.moe_layer_ids)]
    if dense:
        raise ConfigError(f"cannot export to MixtralForCausalLM: blocks {dense} are dense, Mixtral has an MoE "
                          "MLP in every layer (train with model.config.moe_layers: null)")
    for i, layer in enumerate(model.moe_layers()):
        if torch.any(layer.router.expert_bias != 0):
            raise ConfigError(f"cannot export to MixtralForCausalLM: layer {i} has a non-zero aux-loss-free "
                              "routing bias (router_bias_update_rate > 0); Mixtral has no routing bias")
    if model.config.hidden_size % model.config.num_heads:
        raise ConfigError("hidden_size must be divisible by num_heads")


UNRECORDED_CONTEXT = 131072
"""``max_position_embeddings`` of a model whose training length is not recorded: rotary embeddings
have no table to size, so this only bounds what transformers lets a user feed."""


def hf_config(cfg: ModelConfig, max_positions: int | None = None) -> dict:
    """config.json contents for a MixtralForCausalLM with this shape; ``max_positions`` is the
    length the model was trained and validated on (its windows), so HF tools do not offer it
    contexts it has never seen."""
    return {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
        "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size, "intermediate_size": cfg.ffn_hidden_size,
        "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim, "hidden_act": "silu",
        "num_local_experts": cfg.num_experts, "num_experts_per_tok": cfg.top_k,
        "rms_norm_eps": cfg.norm_eps, "rope_theta": cfg.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "tie_word_embeddings": cfg.tie_embeddings, "max_position_embeddings": max_positions or UNRECORDED_CONTEXT,
        "router_aux_loss_coef": cfg.aux_loss_coef, "output_router_logits": False, "router_jitter_noise": 0.0,
        "sliding_window": None, "attention_dropout": 0.0, "initializer_range": cfg.init_std,
        "bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID, "torch_dtype": "float32",
    }


def model_config_from_hf(config: dict) -> ModelConfig:
    """Inverse of :func:`hf_config` (raises ConfigError for shapes biomoe cannot hold)."""
    if config.get("model_type") != "mixtral":
        raise ConfigError("import-hf expects a Mixtral folder, "
                          f"config.json has model_type={config.get('model_type')!r}")
    rope = config.get("rope_parameters") or {}
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    if head_dim * config["num_attention_heads"] != config["hidden_size"]:
        raise ConfigError("import-hf: head_dim * num_attention_heads != hidden_size is not supported by biomoe")
    return ModelConfig(
        vocab_size=config["vocab_size"], hidden_size=config["hidden_size"],
        num_layers=config["num_hidden_layers"], num_heads=config["num_attention_heads"],
        num_kv_heads=config.get("num_key_value_heads") or config["num_attention_heads"],
        num_experts=config["num_local_experts"], top_k=config["num_experts_per_tok"],
        ffn_hidden_size=config["intermediate_size"], norm_eps=config.get("rms_norm_eps", 1e-5),
        rope_theta=float(rope.get("rope_theta", config.get("rope_theta", 1e6))),
        tie_embeddings=bool(config.get("tie_word_embeddings", False)),
        aux_loss_coef=config.get("router_aux_loss_coef", 0.01))


def to_hf_state_dict(model: MoETransformer) -> dict[str, Tensor]:
    """biomoe parameter names → Mixtral checkpoint names (contiguous tensors, no shared storage)."""
    check_exportable(model)
    f = model.config.ffn_hidden_size
    out: dict[str, Tensor] = {}
    for name, tensor in model.state_dict().items():
        if name in _TOP_RENAMES:
            if name == "lm_head.weight" and model.config.tie_embeddings:
                continue  # tied: transformers rebuilds it from the embedding
            out[_TOP_RENAMES[name]] = tensor
            continue
        match = re.fullmatch(r"blocks\.(\d+)\.(.+)", name)
        if match is None:
            raise ConfigError(f"cannot export parameter {name!r}: no Mixtral equivalent")
        layer, rest = match.groups()
        prefix = f"model.layers.{layer}."
        if rest in _LAYER_RENAMES:
            out[prefix + _LAYER_RENAMES[rest]] = tensor
        elif rest == "mlp.experts.gate_up_proj":
            for j, expert in enumerate(tensor):
                out[f"{prefix}block_sparse_moe.experts.{j}.w1.weight"] = expert[:f]
                out[f"{prefix}block_sparse_moe.experts.{j}.w3.weight"] = expert[f:]
        elif rest == "mlp.experts.down_proj":
            for j, expert in enumerate(tensor):
                out[f"{prefix}block_sparse_moe.experts.{j}.w2.weight"] = expert
        elif rest == "mlp.router.expert_bias":
            continue  # checked to be zero above
        else:
            raise ConfigError(f"cannot export parameter {name!r}: no Mixtral equivalent")
    return {k: v.detach().contiguous().clone() for k, v in out.items()}


def from_hf_state_dict(hf: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """Mixtral checkpoint names (per-expert w1/w2/w3 or fused 5.x) → biomoe state dict."""
    inverse_layer = {v: k for k, v in _LAYER_RENAMES.items()}
    inverse_top = {v: k for k, v in _TOP_RENAMES.items()}
    out: dict[str, Tensor] = {}
    experts: dict[tuple[int, str, int], Tensor] = {}
    for name, tensor in hf.items():
        name = name.replace(".mlp.gate.", ".block_sparse_moe.gate.")
        if name in inverse_top:
            out[inverse_top[name]] = tensor
            continue
        match = re.fullmatch(r"model\.layers\.(\d+)\.(.+)", name)
        if match is None:
            raise ConfigError(f"import-hf: unexpected tensor {name!r}")
        layer, rest = int(match.group(1)), match.group(2)
        per_expert = re.fullmatch(r"block_sparse_moe\.experts\.(\d+)\.(w[123])\.weight", rest)
        if rest in inverse_layer:
            out[f"blocks.{layer}.{inverse_layer[rest]}"] = tensor
        elif per_expert is not None:
            experts[(layer, per_expert.group(2), int(per_expert.group(1)))] = tensor
        elif rest in ("mlp.experts.gate_up_proj", "mlp.experts.down_proj"):
            out[f"blocks.{layer}.{rest}"] = tensor
        else:
            raise ConfigError(f"import-hf: unexpected tensor {name!r}")
    for layer in range(cfg.num_layers):
        if (layer, "w1", 0) in experts:
            e = range(cfg.num_experts)
            out[f"blocks.{layer}.mlp.experts.gate_up_proj"] = torch.stack(
                [torch.cat([experts[(layer, "w1", j)], experts[(layer, "w3", j)]]) for j in e])
            out[f"blocks.{layer}.mlp.experts.down_proj"] = torch.stack([experts[(layer, "w2", j)] for j in e])
        out[f"blocks.{layer}.mlp.router.expert_bias"] = torch.zeros(cfg.num_experts)
    if cfg.tie_embeddings:
        out["lm_head.weight"] = out["embed.weight"]
    return out


def export_hf(ckpt_path: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> Path:
    """Write a complete transformers folder for MixtralForCausalLM; returns the folder.

    ``model.safetensors`` + ``config.json`` (the model), ``tokenizer.json`` + ``tokenizer_config.json``
    (biomoe's ids, see :mod:`biomoe.interop.hf_tokenizer`), ``generation_config.json`` (samples
    A/C/G/T only) and ``README.md`` (a model card from what the checkpoint records). ``ckpt_path``
    may be a run folder: its best checkpoint is exported."""
    out = Path(out_dir)
    with _no_empty_folders_on_failure(out):
        return _export_hf(ckpt_path, out)


@contextlib.contextmanager
def _no_empty_folders_on_failure(out: Path) -> Iterator[None]:
    """An export that fails (a missing checkpoint, a model Mixtral cannot hold) leaves no empty
    output folder behind: the folders it created for ``out`` are removed again while they are
    empty (the output checks create them to try a write there)."""
    created = []
    folder = out.absolute()
    while not folder.exists() and folder.parent != folder:
        created.append(folder)
        folder = folder.parent
    try:
        yield
    except BaseException:
        for folder in created:  # innermost first
            with contextlib.suppress(OSError):
                folder.rmdir()  # only while empty
        raise


def _export_hf(ckpt_path: str | os.PathLike[str], out: Path) -> Path:
    from safetensors.torch import save_file  # optional dependency

    ckpt_path = resolve_checkpoint(ckpt_path)
    check_outputs([out / name for name in _EXPORTED_FILES], [ckpt_path])
    model = load_model(ckpt_path)
    tensors = to_hf_state_dict(model)
    record = training_record(ckpt_path)
    context = record.data.get("seq_length")
    context = context if isinstance(context, int) and context > 0 else None
    fold = bool(record.data.get("fold_lowercase", True))
    out.mkdir(parents=True, exist_ok=True)
    texts = {name: data for name, data in tokenizer_files(fold, context, scratch_dir=out).items()}
    texts["generation_config.json"] = generation_config_text(model.config.vocab_size, context or 1024).encode()
    total = sum(t.numel() for t in tensors.values())
    texts["README.md"] = model_card(model.config, total, record, Path(ckpt_path).name).encode()
    texts["config.json"] = (json.dumps(hf_config(model.config, context), indent=2) + "\n").encode()
    # the whole folder at once: on any failure (a full disk in the middle of the weights) every file
    # of an earlier export stays as it was, and none of this one appears
    with commit_together([out / "model.safetensors", *(out / name for name in texts)]) as outputs:
        save_file(tensors, str(outputs.temp(out / "model.safetensors")), metadata={"format": "pt"})
        for name, data in texts.items():
            outputs.temp(out / name).write_bytes(data)
    return out


def _warn_if_foreign(folder: Path, config: dict) -> bool:
    """A folder that is not a biomoe export imports, but with a warning naming what differs: its
    weights are only meaningful read through the vocabulary they were trained with. Returns whether
    the folder is foreign."""
    difference = vocabulary_difference(folder, config)
    if difference is not None:
        warnings.warn(f"{folder}: not biomoe's vocabulary ({difference}); imported anyway, but biomoe reads "
                      "sequence with its own token ids", UserWarning, stacklevel=2)
    return difference is not None


def import_hf(hf_dir: str | os.PathLike[str], out_ckpt: str | os.PathLike[str]) -> Path:
    """A Lightning checkpoint (weights + hyper-parameters) from a MixtralForCausalLM folder.

    The result loads with :func:`biomoe.inference.scoring.load_model` and as ``--ckpt_path`` for
    ``validate``/``test``; it carries no optimizer state, so it starts a new ``fit`` only as
    weights.
    """
    from safetensors.torch import load_file  # optional dependency

    folder = Path(hf_dir)
    if not (folder / "config.json").is_file():
        raise GenomeInputError(folder, "no config.json: not a transformers model folder")
    shards = sorted(folder.glob("*.safetensors"))
    if not shards:
        raise GenomeInputError(folder, "no *.safetensors weights (PyTorch .bin files are not read)")
    out = Path(out_ckpt)
    check_outputs([out], [folder])  # e.g. OUT inside the folder, named like one of its shards
    try:
        config = json.loads((folder / "config.json").read_text())
        cfg = model_config_from_hf(config)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise GenomeInputError(folder / "config.json", f"not a usable transformers config "
                                                       f"({type(exc).__name__}: {exc})") from None
    foreign = _warn_if_foreign(folder, config)
    hf: dict[str, Tensor] = {}
    for shard in shards:
        try:
            hf.update(load_file(str(shard)))
        except Exception as exc:  # safetensors' SafetensorError: truncated or not safetensors
            raise GenomeInputError(shard, f"cannot read safetensors weights ({type(exc).__name__}: "
                                          f"{' '.join(str(exc).split())[:200]})") from None
    check_finite(str(folder), {}, hf)
    model = MoETransformer(cfg)
    try:
        model.load_state_dict(from_hf_state_dict(hf, cfg))
    except (RuntimeError, KeyError) as exc:  # shapes or names that config.json does not describe
        raise GenomeInputError(folder, f"weights do not match config.json ({type(exc).__name__}: "
                                       f"{' '.join(str(exc).split())[:200]})") from None
    # What fit's checkpoints hold, in the same plain form (the configs as dicts, which the command
    # line's parser reads back), less what only a training run has: loop progress, callback and
    # optimizer state. validate/test/predict read it like a best checkpoint, fit only as weights.
    checkpoint = {
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
        "hyper_parameters": {"config": dataclasses.asdict(cfg), "optim": dataclasses.asdict(OptimConfig()),
                             "log_expert_load_every_n_steps": 50},
        "pytorch-lightning_version": lightning.__version__,
        "epoch": 0, "global_step": 0,
    }
    trained = None if foreign else exported_training_length(config)
    if trained is not None:
        checkpoint["datamodule_hyper_parameters"] = {"seq_length": trained}
    atomic_torch_save(checkpoint, out)
    return out


def exported_training_length(config: dict) -> int | None:
    """The training window of a biomoe export (its ``max_position_embeddings``), or None.

    Commands score in windows of the training length by default; an imported checkpoint that did
    not record it would score in the default window instead, and a round trip of the very same
    weights would then change every score. Only biomoe's own exports are read this way (the caller
    checks the vocabulary): another model's ``max_position_embeddings`` is the most it accepts, not
    what it was trained on."""
    context = config.get("max_position_embeddings")
    if not isinstance(context, int):
        return None
    return context if 0 < context < UNRECORDED_CONTEXT else None

