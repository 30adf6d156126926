"""A model whose LM head rates every non-base token far above the bases: what sampling must still refuse."""

from __future__ import annotations

import torch
from torch import nn

from biomoe.data.tokenizer import A_ID, N_ID


def favour_special_tokens(model: nn.Module) -> None:
    """Replace ``model.lm_head`` by a biased copy whose logits for every token but A/C/G/T are 1e4 higher."""
    head = nn.Linear(model.config.hidden_size, model.config.vocab_size)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.fill_(0.0)
        head.bias[:A_ID] = 1e4
        head.bias[N_ID:] = 1e4
    model.lm_head = head
