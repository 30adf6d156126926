"""Build the contenders: transformers' MixtralForCausalLM and biomoe's MoETransformer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from bench.shapes import BenchShape
from biomoe.build import build_model
from biomoe.model.config import ModelConfig, RuntimeConfig
from biomoe.model.losses import masked_cross_entropy


@dataclass
class Contender:
    """A model plus a function computing its training loss on (input_ids, labels)."""

    name: str
    model: torch.nn.Module
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    fused_adam: bool


def build_hf(shape: BenchShape, experts_impl: str, device: torch.device, fused_adam: bool = False,
             amp: bool = False, compile_model: bool = False, label: str | None = None) -> Contender:
    """HF Mixtral with the given experts implementation ("grouped_mm", "eager").

    ``compile_model``: the forward runs through ``torch.compile(model)``, the training step an HF
    user writes to go faster (the compilation falls in the warm-up steps).

    Pure bf16 weights by default. ``amp``: fp32 weights with the forward under
    ``torch.autocast(bfloat16)``, which is what HF's Trainer does with ``bf16=True`` on an fp32
    model. The optimizer is torch's AdamW: fused with ``fused_adam`` (HF Trainer's default for
    torch >= 2.8), else its ``foreach`` default.
    """
    from transformers import MixtralConfig, MixtralForCausalLM  # optional dependency

    config = MixtralConfig(
        vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.ffn,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads, num_local_experts=shape.experts,
        num_experts_per_tok=shape.top_k, max_position_embeddings=max(shape.seq, 4096),
        tie_word_embeddings=False, output_router_logits=False,
        attn_implementation="sdpa", experts_implementation=experts_impl)
    with torch.device(device):
        model = MixtralForCausalLM(config)
    if not amp:
        model = model.to(torch.bfloat16)
    model.config.use_cache = False
    forward = torch.compile(model) if compile_model else model

    def loss_fn(ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            logits = forward(input_ids=ids, use_cache=False).logits
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))

    if label is None:
        label = "hf-default(grouped_mm)" if experts_impl == "grouped_mm" else f"hf-{experts_impl}"
        label += ("+amp" if amp else "") + ("+fused-adamw" if fused_adam else "")
        label += "+compile" if compile_model else ""
    return Contender(label, model, loss_fn, fused_adam=fused_adam)


@dataclass
class ReferenceInit:
    """The HF baseline's initial weights in biomoe's names, plus the HF settings that change the
    math (RoPE base, norm epsilon). Every biomoe contender starts from these, so the loss columns
    of HF and biomoe are comparable step by step (same start, same tokens, same optimizer)."""

    state_dict: dict[str, torch.Tensor]
    rope_theta: float
    norm_eps: float


def reference_init(shape: BenchShape, device: torch.device, seed: int = 0) -> ReferenceInit:
    """Build the HF default model once with ``seed`` and keep its initial weights on the CPU."""
    # imported here: interop.hf imports Lightning, and bench.scaling (through bench.timing) must not
    from biomoe.interop.hf import from_hf_state_dict, model_config_from_hf

    torch.manual_seed(seed)
    hf = build_hf(shape, "grouped_mm", device).model
    hf_cfg = model_config_from_hf(hf.config.to_dict())
    state = {k: v.detach().to("cpu", copy=True) for k, v in hf.state_dict().items()}
    del hf
    converted = from_hf_state_dict(state, biomoe_config(shape))
    return ReferenceInit(converted, hf_cfg.rope_theta, hf_cfg.norm_eps)


def biomoe_config(shape: BenchShape, init: ReferenceInit | None = None) -> ModelConfig:
    """The benchmark shape as a biomoe architecture (HF's rope/norm settings when comparing)."""
    kwargs = dict(vocab_size=shape.vocab, hidden_size=shape.hidden, num_layers=shape.layers,
                  num_heads=shape.heads, num_kv_heads=shape.kv_heads, num_experts=shape.experts,
                  top_k=shape.top_k, ffn_hidden_size=shape.ffn)
    if init is not None:
        kwargs.update(rope_theta=init.rope_theta, norm_eps=init.norm_eps)
    return ModelConfig(**kwargs)


def build_biomoe(shape: BenchShape, backend: str, precision: str, device: torch.device,
                 activation_checkpointing: bool = False, compile_blocks: bool = False,
                 init: ReferenceInit | None = None, layer_backends: dict[str, str] | None = None,
                 label: str | None = None) -> Contender:
    """biomoe's bare loop: the model as training builds it (:func:`biomoe.build.build_model`),
    in bf16 weights, without Lightning around it. ``layer_backends``: e.g.
    ``{"norm_backend": "torch"}`` to take one TE component out (ablation)."""
    config = biomoe_config(shape, init)
    runtime = RuntimeConfig(precision=precision, expert_backend=backend, compile=compile_blocks,
                            activation_checkpointing=activation_checkpointing, **(layer_backends or {}))
    with torch.device(device):
        built = build_model(config, runtime, device, announce=print)
    model = built.model.to(torch.bfloat16)
    if init is not None:
        model.load_state_dict(init.state_dict)  # copies into the bf16 parameters
    coefs = (config.aux_loss_coef, config.z_loss_coef)

    def loss_fn(ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        with built.autocast():
            out = model(ids)
        mask = torch.ones_like(labels, dtype=torch.bool)
        return masked_cross_entropy(out.logits, labels, mask) + coefs[0] * out.aux_loss + coefs[1] * out.z_loss

    suffix = ("+ac" if activation_checkpointing else "") + ("+compile" if compile_blocks else "")
    return Contender(label or f"biomoe-{backend}-{precision}{suffix}", model, loss_fn, fused_adam=True)
