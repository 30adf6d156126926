"""Masked next-token loss for nucleotide models."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

LN2 = math.log(2.0)


def masked_cross_entropy_sum(logits: Tensor, labels: Tensor, loss_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Sum of per-position cross-entropy (nats, fp32) over unmasked positions, and their count.

    Returning (sum, count) rather than a mean lets callers weight batches and ranks exactly, so
    bits/base is the true per-base average over a held-out set, not a mean of batch means.
    """
    mask = loss_mask.reshape(-1).to(torch.float32)
    per_position = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1),
                                   reduction="none")
    per_position = torch.where(mask > 0, per_position, torch.zeros_like(per_position))
    return per_position.sum(), mask.sum()


def masked_cross_entropy_rows(logits: Tensor, labels: Tensor, loss_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Per sequence (row): the sum of cross-entropy (nats, fp32) over unmasked positions, and their
    count, each ``[batch]``; what per-genome metrics add up over the windows of each genome."""
    mask = loss_mask.to(torch.float32)
    per_position = F.cross_entropy(logits.float().transpose(1, 2), labels, reduction="none")
    per_position = torch.where(mask > 0, per_position, torch.zeros_like(per_position))
    return per_position.sum(-1), mask.sum(-1)


def masked_cross_entropy(logits: Tensor, labels: Tensor, loss_mask: Tensor) -> Tensor:
    """Mean cross-entropy over unmasked positions (0 when nothing is unmasked, never NaN)."""
    total, count = masked_cross_entropy_sum(logits, labels, loss_mask)
    return total / count.clamp_min(1.0)


def per_position_log_likelihood(logits: Tensor, labels: Tensor) -> Tensor:
    """log p(label) at each position, in nats, fp32: [batch, seq]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
