"""ROC curve and its area for one score against a binary label, exact (no thresholds binned).

``mutations`` ranks variants by their log-likelihood ratio. torchmetrics computes the same
curve, but importing any of it imports all of torchmetrics and, through its text metrics,
transformers (seconds of start-up for a command that needs a sort and a cumulative sum).
The curve here is torchmetrics' exact one (one point per distinct score, highest first, from
(0, 0)); the scores are used as given (torchmetrics passes scores outside [0, 1] through a
sigmoid first, which ties scores beyond about ±37 in float64; the ranks are otherwise the same).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["binary_auroc", "binary_roc"]


def binary_roc(preds: torch.Tensor | np.ndarray,
               target: torch.Tensor | np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(fpr, tpr, thresholds)``: one point per distinct score (highest first) after (0, 0);
    a positive is ``target != 0``. Both classes must be present."""
    scores = np.asarray(preds, dtype=np.float64).reshape(-1)
    positive = np.asarray(target).reshape(-1) != 0
    order = np.argsort(-scores, kind="stable")
    scores, positive = scores[order], positive[order]
    last_of_each = np.append(np.flatnonzero(np.diff(scores)), scores.size - 1)  # where the score changes
    true_pos = np.cumsum(positive)[last_of_each]
    false_pos = last_of_each + 1 - true_pos
    tpr = np.append(0.0, true_pos / true_pos[-1])
    fpr = np.append(0.0, false_pos / false_pos[-1])
    thresholds = np.append(scores[0] + 1.0 if scores.size else 1.0, scores[last_of_each])
    return torch.from_numpy(fpr), torch.from_numpy(tpr), torch.from_numpy(thresholds)


def binary_auroc(preds: torch.Tensor | np.ndarray, target: torch.Tensor | np.ndarray) -> float:
    """Area under :func:`binary_roc` (trapezoids: a tie between classes counts one half): the
    chance that a positive scores above a negative."""
    fpr, tpr, _ = binary_roc(preds, target)
    return float(np.trapezoid(tpr.numpy(), fpr.numpy()) if hasattr(np, "trapezoid")
                 else np.trapz(tpr.numpy(), fpr.numpy()))
