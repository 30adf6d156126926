"""The one seam through which a model's layers get their kernels, chosen before it is built.

The model is written against these factories and never asks which library stands behind them:
the defaults are plain PyTorch (the CPU reference path CI tests), and
:func:`biomoe.backends.select.select_backends` fills them with Transformer Engine kernels where a
GPU and TE are there. Every choice keeps the parameters and their state_dict keys, so a checkpoint
written under one set of backends loads under any other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor, nn

from biomoe.model.documents import DocumentLayout
from biomoe.model.moe.dispatch import LocalDispatcher, TokenDispatcher
from biomoe.model.moe.router import TopKRouter

CoreAttention = Callable[[Tensor, Tensor, Tensor, DocumentLayout | None], Tensor]
"""``(q, k, v, documents)`` on ``[batch, heads, seq, head_dim]`` (GQA handled inside) →
``[batch, seq, heads·head_dim]``; causal, and within each document when ``documents`` is given."""


@dataclass(frozen=True)
class LayerBackends:
    """Factories for each replaceable part of a block, plus the expert backend's registry name."""

    norm: Callable[..., nn.RMSNorm] = nn.RMSNorm
    """``(hidden_size, eps=...)`` → an ``nn.RMSNorm`` (subclass) with the same ``weight``."""
    core_attention: Callable[[int, int, int], CoreAttention] | None = None
    """``(num_heads, num_kv_heads, head_dim)`` → a fused attention callable; None = torch SDPA."""
    router: type[TopKRouter] = TopKRouter
    """The router class (same constructor, parameters and buffers as :class:`TopKRouter`)."""
    dispatcher: Callable[[], TokenDispatcher] = LocalDispatcher
    """Builds each MoE layer's local dispatcher (expert parallelism wraps it later)."""
    experts: str = "grouped"
    """A name in :data:`~biomoe.model.moe.experts.EXPERT_BACKENDS` (never ``auto``: the build step
    resolves it for the device first)."""


TORCH_BACKENDS = LayerBackends()
