"""The whole-step CUDA graph's eager path (what runs without CUDA) and the bench row built on it.
The captured path itself is tested on a GPU (tests/gpu/test_captured_steps.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.run import BenchContext, Row, measure
from bench.shapes import parse_case
from biomoe.training.step.cuda_graph import GraphedStep, set_learning_rates

CPU = torch.device("cpu")


def _train(use_graphed_step: bool) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def step(batch):
        loss = (model(batch["x"]).squeeze(-1) - batch["y"]).square().mean()
        loss.backward()
        optimizer.step()
        return loss.detach()

    run = GraphedStep(step, optimizer, CPU, warmup_steps=2)
    gen = torch.Generator().manual_seed(3)
    losses = []
    for _ in range(8):
        batch = {"x": torch.randn(5, 6, generator=gen), "y": torch.randn(5, generator=gen)}
        if use_graphed_step:
            losses.append(float(run(batch)))
        else:
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(step(batch)))
    assert not run.captured  # nothing is captured without CUDA
    return losses


def test_without_cuda_a_graphed_step_is_the_plain_step_with_fresh_gradients():
    """Gradients are dropped before every call, as before a capture: nothing accumulates."""
    assert _train(True) == _train(False)


def test_a_graphed_step_needs_an_eager_step_before_capture():
    with pytest.raises(ValueError, match="warmup_steps"):
        GraphedStep(lambda batch: torch.zeros(()), torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0),
                    CPU, warmup_steps=0)


def test_learning_rates_are_written_into_device_tensors_in_place():
    weight = torch.zeros(2, requires_grad=True)
    optimizer = torch.optim.AdamW([{"params": [weight]}, {"params": [torch.zeros(1, requires_grad=True)]}])
    optimizer.param_groups[0]["lr"] = held = torch.tensor(1e-3)
    set_learning_rates(optimizer, [5e-4, 2e-4])
    assert optimizer.param_groups[0]["lr"] is held and float(held) == pytest.approx(5e-4)
    assert optimizer.param_groups[1]["lr"] == 2e-4
    with pytest.raises(ValueError):
        set_learning_rates(optimizer, [1e-4])


def test_the_graphed_bench_row_trains_like_the_bare_loop_on_the_same_kernels():
    ctx = BenchContext(CPU, Path("configs/dna-small.yaml"), warmup=1, steps=2, loop_backend="grouped",
                       independent_init=True)
    tiny = parse_case("tiny")
    graphed = measure(Row(tiny, "biomoe-loop-graph", "bf16"), ctx)
    plain = measure(Row(tiny, "biomoe-loop", "bf16"), ctx)
    assert graphed.status == plain.status == "ok", (graphed.error, plain.error)
    assert graphed.details["cuda_graph"] == "whole step" and graphed.details["expert_backend"] == "grouped"
    assert graphed.losses == pytest.approx(plain.losses, rel=1e-5)
