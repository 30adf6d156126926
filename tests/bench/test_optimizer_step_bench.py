"""The optimizer-step benchmark's measurement on a CPU: every row timed, bytes per second derived."""

from __future__ import annotations

import torch

from bench.optimizer_step import contenders, measure


def test_every_optimizer_row_is_timed_after_the_bandwidth_reference():
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(64, 32).to(torch.bfloat16)), torch.nn.Parameter(torch.randn(32))]
    rows = contenders(te=False)
    results = measure(params, rows, iters=2, warmup=1)
    assert [r["optimizer"] for r in results[1:]] == [name for name, _, _ in rows]
    assert results[0]["optimizer"].startswith("copy of one fp32 buffer")
    count = 64 * 32 + 32
    for record in results:
        assert 0 < record["ms_min"] <= record["ms"] <= record["ms_max"]
        assert abs(record["tb_per_s"] - record["bytes_per_param"] * count / record["ms"] / 1e9) < 1e-12
    assert all(p.dtype == torch.bfloat16 for p in params[:1])  # the weights keep their dtype
