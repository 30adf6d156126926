"""The experts each base is routed to, computed without biomoe's routing counters: the routing
tests compare what ``biomoe routing`` counts with this independent reading of the model."""

from __future__ import annotations

import numpy as np
import torch

from biomoe.model.transformer import MoETransformer, rotary_tables


@torch.no_grad()
def direct_topk(model: MoETransformer, ids: torch.Tensor) -> dict[int, np.ndarray]:
    """Experts chosen [rows, bases, k] per MoE block for the base positions of ``ids`` (``<bos>``
    first), from each router's gate and a plain softmax + top-k on the block's input (no hooks)."""
    x = model.embed(ids)
    cos, sin = rotary_tables(ids.shape[1], model.config.head_dim, model.config.rope_theta, ids.device)
    chosen = {}
    for i, block in enumerate(model.blocks):
        if block.is_moe:
            h = block.mlp_norm(x + block.attn(block.attn_norm(x), cos, sin, None, i))
            probs = torch.softmax(h[:, 1:].float() @ block.mlp.router.gate.weight.float().T, dim=-1)
            chosen[i] = probs.topk(model.config.top_k, dim=-1).indices.numpy()
        x, _, _ = block(x, cos, sin)
    return chosen
