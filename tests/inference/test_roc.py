"""The ROC curve and AUROC ``mutations`` reports: exact, ties between classes counted one half."""

from __future__ import annotations

import numpy as np
import pytest

from biomoe.inference.roc import binary_auroc, binary_roc


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auroc_is_the_chance_a_positive_scores_above_a_negative(seed):
    rng = np.random.default_rng(seed)
    scores = np.round(rng.normal(size=60), 1)  # rounded: many ties, within and across classes
    labels = rng.integers(0, 2, 60)
    pos, neg = scores[labels == 1], scores[labels == 0]
    pairs = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
    assert binary_auroc(scores, labels) == pytest.approx(pairs.mean(), abs=1e-12)


def test_the_curve_runs_from_the_origin_to_one_one_one_point_per_distinct_score():
    fpr, tpr, thresholds = binary_roc(np.array([0.9, 0.5, 0.5, 0.1]), np.array([1, 1, 0, 0]))
    assert fpr.tolist() == [0.0, 0.0, 0.5, 1.0] and tpr.tolist() == [0.0, 0.5, 1.0, 1.0]
    assert thresholds[1:].tolist() == [0.9, 0.5, 0.1]
