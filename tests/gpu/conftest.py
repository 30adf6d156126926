"""GPU tests: skipped (not failed) without CUDA or Transformer Engine."""

from __future__ import annotations

import pytest
import torch

from biomoe.te.availability import te_installed


def pytest_collection_modifyitems(config, items):
    reason = None
    if not torch.cuda.is_available():
        reason = "needs a CUDA GPU"
    elif not te_installed():
        reason = "needs Transformer Engine (pip install biomoe[te])"
    for item in items:
        if "tests/gpu" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
