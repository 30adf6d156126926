"""Build the contenders: transformers' MixtralForCausalLM and biomoe's MoETransformer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from biomoe.bench.shapes import BenchShape
from biomoe.model.config import ModelConfig
from biomoe.model.losses import masked_cross_entropy
from biomoe.model.transformer import MoETransformer


@dataclass
class Contender:
    """A model plus a function computing its training loss on (input_ids, labels)."""

    name: str
    model: torch.nn.Module
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    fused_adam: bool


def build_hf(shape: BenchShape, experts_impl: str, device: torch.device,
             fused_adam: bool = False) -> Contender:
    """HF Mixtral in bf16 with the given experts implementation ("grouped_mm" default, "eager").

    The optimizer is torch's AdamW with its defaults (the multi-tensor ``foreach`` kernels) unless
    ``fused_adam``: that extra row shows how much of biomoe's lead comes from its fused AdamW.
    """
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(
        vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.ffn,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads, num_local_experts=shape.experts,
        num_experts_per_tok=shape.top_k, max_position_embeddings=max(shape.seq, 4096),
        tie_word_embeddings=False, output_router_logits=False,
        attn_implementation="sdpa", experts_implementation=experts_impl)
    with torch.device(device):
        model = MixtralForCausalLM(config).to(torch.bfloat16)
    model.config.use_cache = False

    def loss_fn(ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = model(input_ids=ids, use_cache=False).logits
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))

    label = "hf-default(grouped_mm)" if experts_impl == "grouped_mm" else f"hf-{experts_impl}"
    return Contender(label + ("+fused-adamw" if fused_adam else ""), model, loss_fn, fused_adam=fused_adam)


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
    from biomoe.interop.hf import from_hf_state_dict, model_config_from_hf

    torch.manual_seed(seed)
    hf = build_hf(shape, "grouped_mm", device).model
    hf_cfg = model_config_from_hf(hf.config.to_dict())
    state = {k: v.detach().to("cpu", copy=True) for k, v in hf.state_dict().items()}
    del hf
    converted = from_hf_state_dict(state, biomoe_config(shape, "grouped"))
    return ReferenceInit(converted, hf_cfg.rope_theta, hf_cfg.norm_eps)


def biomoe_config(shape: BenchShape, backend: str, precision: str = "bf16",
                  init: ReferenceInit | None = None, **layer_backends: str) -> ModelConfig:
    """``layer_backends``: e.g. ``norm_backend="torch"`` to take one TE component out (ablation)."""
    kwargs = dict(vocab_size=shape.vocab, hidden_size=shape.hidden, num_layers=shape.layers,
                  num_heads=shape.heads, num_kv_heads=shape.kv_heads, num_experts=shape.experts,
                  top_k=shape.top_k, ffn_hidden_size=shape.ffn, expert_backend=backend,
                  precision=precision, **layer_backends)
    if init is not None:
        kwargs.update(rope_theta=init.rope_theta, norm_eps=init.norm_eps)
    return ModelConfig(**kwargs)


def build_biomoe(shape: BenchShape, backend: str, precision: str, device: torch.device,
                 activation_checkpointing: bool = False, compile_blocks: bool = False,
                 init: ReferenceInit | None = None, layer_backends: dict[str, str] | None = None,
                 label: str | None = None) -> Contender:
    config = biomoe_config(shape, backend, precision, init, **(layer_backends or {}))
    with torch.device(device):
        model = MoETransformer(config).to(torch.bfloat16)
    if init is not None:
        model.load_state_dict(init.state_dict)  # copies into the bf16 parameters
    # The same start-up as training: precision check, TE layers where available, `auto` resolved.
    from biomoe.backends.te.runtime import prepare

    runtime = prepare(model, config, device, announce=print)
    if activation_checkpointing:
        from biomoe.model.activation_checkpointing import apply_activation_checkpointing

        apply_activation_checkpointing(model)
    if compile_blocks:
        from biomoe.model.compile import apply_compile

        apply_compile(model)
    coefs = (config.aux_loss_coef, config.z_loss_coef)

    def loss_fn(ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        with runtime.autocast():
            out = model(ids)
        mask = torch.ones_like(labels, dtype=torch.bool)
        return masked_cross_entropy(out.logits, labels, mask) + coefs[0] * out.aux_loss + coefs[1] * out.z_loss

    suffix = ("+ac" if activation_checkpointing else "") + ("+compile" if compile_blocks else "")
    return Contender(label or f"biomoe-{backend}-{precision}{suffix}", model, loss_fn, fused_adam=True)
