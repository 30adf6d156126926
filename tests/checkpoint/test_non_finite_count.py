"""Counting NaN and inf in checkpoint tensors: the one-pass check finds every kind of bad entry in
every dtype a checkpoint holds, and counts them exactly."""

from __future__ import annotations

import pytest
import torch

from biomoe.checkpoint.verify import non_finite_count


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_each_kind_of_bad_entry_is_counted_in_each_dtype(dtype, bad):
    values = torch.randn(7, 33, generator=torch.Generator().manual_seed(0)).to(dtype)
    assert non_finite_count(values) == 0
    values[3, 5] = bad
    values[6, 32] = bad
    assert non_finite_count(values) == 2


def test_mixed_bad_entries_complex_float8_and_empty_tensors():
    values = torch.randn(100)
    values[[1, 50, 99]] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    assert non_finite_count(values) == 3
    assert non_finite_count(values[2:49]) == 0  # a finite view of a tensor with bad entries elsewhere
    complex_values = torch.randn(5, dtype=torch.complex64)
    complex_values[2] = complex(0.0, float("nan"))
    complex_values[4] = complex(float("inf"), float("nan"))  # one entry, however many parts are bad
    assert non_finite_count(complex_values) == 2
    float8 = torch.tensor([1.0, float("nan"), 2.0]).to(torch.float8_e4m3fn)  # no aminmax kernel
    assert non_finite_count(float8) == 1
    assert non_finite_count(torch.empty(0, 4)) == 0
