"""The held-out cross-entropy as a token-weighted mean that accumulates in fp32 under any precision.

torchmetrics casts each update to the metric's ``dtype``, and re-reads that dtype from torch's
default dtype whenever the metric is moved (Lightning moves logged metrics every step). Under
``trainer.precision: bf16-true`` the default dtype is bf16 around the forward, so a plain
``MeanMetric`` would add up the validation loss in bf16, whose step near 2 bits/base (0.008) is
coarser than the differences a validation is read for.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import MeanMetric


class Fp32MeanMetric(MeanMetric):
    """``MeanMetric`` whose sums are fp32 tensors whatever the module's or the default dtype."""

    def update(self, value: Tensor, weight: Tensor) -> None:  # type: ignore[override]
        value = torch.as_tensor(value, device=self.device).detach().to(torch.float32)
        weight = torch.broadcast_to(torch.as_tensor(weight, device=self.device).detach().to(torch.float32),
                                    value.shape)
        # Reassigned, not added in place: a state converted to bf16 with the module becomes fp32 here.
        self.mean_value = self.mean_value.to(torch.float32) + (value * weight).sum()
        self.weight = self.weight.to(torch.float32) + weight.sum()
