"""``python -m bench.expert_gemms``: the argument check and the report's table (the timing needs a GPU)."""

from __future__ import annotations

from bench.expert_gemms import OPS, Inputs, Shape, main, reference, table


def test_an_unknown_kernel_family_is_one_line_before_anything_runs(capsys) -> None:
    assert main(["--impls", "quack,cutlass", "--out", "unused"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "biomoe: error: --impls: unknown cutlass (known: quack, triton)"


def _row(scale: float) -> dict:
    row = {"size": "base", "variant": "moe", "dense_total_ms": 2.0, "dense_with_swiglu_ms": 2.7,
           "torch_grouped_step_ms": 5.0, "torch_grouped_over_dense": 2.5, "dense_tflops": 650.0,
           "dense_ms": {op: 2.0 / len(OPS) for op in OPS}}
    for impl, factor in (("quack", 1.3 * scale), ("triton", 2.4 * scale)):
        row.update({f"{impl}_total_ms": 2.0 * factor, f"{impl}_over_dense": factor,
                    f"{impl}_over_dense_with_swiglu": 2.0 * factor / 2.7, f"{impl}_tflops": 650.0 / factor,
                    f"{impl}_error": {op: 1e-3 for op in OPS}, f"{impl}_error_skewed": {op: 2e-3 for op in OPS},
                    f"{impl}_ms": {op: {"a": 2.0 * factor / len(OPS), "b": 3.0} for op in OPS}})
    return row


def test_the_table_has_a_column_group_per_kernel_family_and_the_best_tile_per_op() -> None:
    report = {"environment": {"gpu": "GPU", "torch": "2", "triton": "3"}, "date": "today", "command": "cmd",
              "impls": ["quack", "triton"], "rows": [_row(1.0)]}
    text = table(report)
    header = next(line for line in text.splitlines() if line.startswith("| size | variant |"))
    assert "quack / dense six" in header and "triton / dense six" in header
    body = next(line for line in text.splitlines() if line.startswith("| base | moe | 2.000"))
    assert "| 1.30x |" in body and "| 2.40x |" in body and "2.0e-03" in body  # the skewed routing's worst error
    per_op = [line for line in text.splitlines() if line.startswith("| base | moe | 0.333")]
    assert per_op and "(a)" in per_op[0]  # the faster tile of each op


def test_the_float32_reference_gives_every_product_of_a_step_with_empty_experts() -> None:
    import torch

    shape = Shape("t", "t", tokens=24, hidden=16, experts=6, top_k=2, ffn=8)
    inp = Inputs(shape, torch.device("cpu"), skew=6.0)
    counts = (inp.routing.offsets[1:] - inp.routing.offsets[:-1]).tolist()
    assert 0 in counts
    ref = reference(inp)
    rows = shape.tokens * shape.top_k
    assert ref["act"].shape == (rows, 8) and ref["dpre"].shape == (rows, 16) and ref["dscore"].shape == (rows,)
    assert ref["dw_up"].shape == (6, 16, 16) and ref["dw_down"].shape == (6, 16, 8)
    empty = [e for e, c in enumerate(counts) if c == 0]
    assert ref["dw_up"][empty].abs().max() == 0  # an expert with no rows gets no gradient
    # a row's routing weight scales its output row, so its gradient is the output gradient · that row
    dout_rows = inp.dout.float().index_select(0, inp.routing.token_of_row.long())
    torch.testing.assert_close(ref["dscore"], (dout_rows * ref["out"]).sum(1), rtol=1e-4, atol=1e-4)
