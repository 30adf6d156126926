"""Refuse, before the first step, a training config whose memory clearly exceeds the machine's.

``fit --config configs/genome.yaml`` on a CPU machine with 24 GB was killed by the kernel's
out-of-memory killer within two steps, with no message at all. What a training step holds is
predictable from the config: the parameters with their gradients and AdamW moments, and the
activations kept for backward, which grow with the tokens of one batch on one device
(``data.batch_size`` x ``data.seq_length``). Like ``--window``'s check in inference
(:func:`biomoe.inference.batching.check_window_memory`) this is a floor, not a forecast: it counts
only what a step cannot do without, with the smallest byte sizes the precision allows, so a config
that fits is never refused; one that cannot fit by that floor stops in one line naming the options
that size it. On the CPU it counts somewhat less than was measured there (:data:`CPU_KEPT_FACTOR`).
"""

from __future__ import annotations

from typing import Any

import torch

from biomoe.errors import ConfigError
from biomoe.resources import host_memory_bytes

__all__ = ["check_training_memory", "total_parameters", "training_memory_floor"]

KEPT_PER_LAYER_TOKEN = 6
"""Values one MoE block must keep per token for its backward, in units of ``hidden_size`` and
``top_k * ffn_hidden_size``: the block's input and its normed copy, attention's output and the
second residual's normed copy (4 x hidden), and per routed copy the expert input, gate, up and
activation (hidden + 3 x ffn per copy); counted below as 6 x hidden + 3 x top_k x ffn, the floor
measured on the CPU (torch SDPA, grouped experts) was above twice that."""


CPU_KEPT_FACTOR = 2.5
"""On the CPU (eager torch kernels: autocast copies, dropout masks, the experts' sorted copies) a
step keeps several times :data:`KEPT_PER_LAYER_TOKEN`'s floor. The check counts 2.5 times the
floor there, below what ``configs/genome.yaml``'s shape keeps, so that it never refuses a run that
fits; on GPUs, whose fused kernels keep less, the floor itself."""


def _bytes_per_activation(precision: str) -> int:
    """2 for 16-bit compute (autocast or true), 4 otherwise."""
    return 2 if ("16" in precision) else 4


def _state_bytes_per_parameter(precision: str) -> int:
    """Weights, gradients and AdamW's two moments: fp32 all (16 bytes), or at the least 2 + 2 + 2 + 2
    for 16-bit weights with 16-bit moments."""
    return 8 if precision.endswith("-true") and "16" in precision else 16


def training_memory_floor(config: Any, parameters: int, tokens_per_device: int, precision: str,
                          shards: int = 1, activation_checkpointing: bool = False, kept_factor: float = 1.0) -> int:
    """Bytes one device needs at least for a training step (see the module docstring);
    ``kept_factor`` scales what a layer keeps per token (:data:`CPU_KEPT_FACTOR` on the CPU)."""
    act = _bytes_per_activation(precision) * kept_factor
    state = parameters * _state_bytes_per_parameter(precision) // max(shards, 1)
    per_layer = act * (KEPT_PER_LAYER_TOKEN * config.hidden_size + 3 * config.top_k * config.ffn_hidden_size)
    layers = config.num_layers
    kept = tokens_per_device * (act * config.hidden_size * layers + per_layer if activation_checkpointing
                                else per_layer * layers)
    logits = tokens_per_device * config.vocab_size * 4  # the loss reads fp32 logits
    return int(state + kept + logits)


def total_parameters(config: Any) -> int:
    """Parameters of a model of this shape (norms left out): the model is built only when the
    trainer starts, after this check."""
    h, f = config.hidden_size, config.ffn_hidden_size
    kv = config.num_kv_heads * config.head_dim
    moe = set(config.moe_layer_ids)
    total = 0
    for layer in range(config.num_layers):
        total += 2 * h * h + 2 * h * kv
        total += (config.num_experts * 3 * h * f + h * config.num_experts + 3 * h * config.shared_expert_size
                  if layer in moe else 3 * h * config.dense_ffn_size)
    embeddings = h * config.vocab_size
    return total + embeddings * (1 if config.tie_embeddings else 2)


def _device_memory(trainer: Any) -> tuple[str, int | None, float]:
    """Where the step runs, its memory in bytes (None: unknown), and the per-token factor there."""
    root = getattr(trainer.strategy, "root_device", torch.device("cpu"))
    if root.type == "cuda" and torch.cuda.is_available():
        return (f"the GPU ({torch.cuda.get_device_name(root)})", torch.cuda.get_device_properties(root).total_memory,
                1.0)
    if root.type == "cpu":
        return "this machine", host_memory_bytes(), CPU_KEPT_FACTOR
    return root.type, None, 1.0


def check_training_memory(model: Any, datamodule: Any, trainer: Any) -> None:
    """One line naming ``data.batch_size``/``data.seq_length`` when a step cannot fit (see the module
    docstring); silent when it can, or when the device does not say how much memory it has."""
    config = getattr(model, "config", None)
    batch, length = getattr(datamodule, "batch_size", None), getattr(datamodule, "seq_length", None)
    if config is None or not isinstance(batch, int) or not isinstance(length, int):
        return
    where, available, factor = _device_memory(trainer)
    if not available:
        return
    runtime = getattr(model, "runtime", None)
    shards = max(int(getattr(trainer, "world_size", 1) or 1), 1)
    parameters = total_parameters(config)
    needed = training_memory_floor(config, parameters, batch * length, str(trainer.precision), shards,
                                   bool(getattr(runtime, "activation_checkpointing", False)), factor)
    if needed > available:
        raise ConfigError(f"data.batch_size={batch} x data.seq_length={length}: one training step needs at least "
                          f"{needed / 1e9:,.0f} GB, more than the {available / 1e9:,.0f} GB of {where}; lower "
                          "data.batch_size (or data.seq_length, or turn on "
                          "model.runtime.activation_checkpointing)")
