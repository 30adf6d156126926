"""One gradient norm per step, shared by the NaN guard and clipping, and the clip coefficient
applied inside a fused optimizer's kernel: the same updates as clipping the gradients first."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch

from biomoe.data.datamodule import GenomeDataModule
from biomoe.model.config import ModelConfig, OptimConfig
from biomoe.training.guards.health import NonFiniteGuard
from biomoe.training.optimization import grad_norms
from biomoe.training.optimization.grad_norms import clip_grad_norm_shared, drop_grad_scale, forget_step_grad_norms
from biomoe.training.optimization.master_adamw import AdamWWithMasterWeights
from biomoe.training.step.lightning_module import BioMoEModule
from conftest import ROOT


def params_with_grads(seed: int, dtype: torch.dtype = torch.float32) -> list[torch.nn.Parameter]:
    torch.manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(shape).to(dtype)) for shape in ((8, 4), (4,), (3, 3, 2))]
    for p in params:
        p.grad = (torch.randn(p.shape) * 5).to(dtype)  # norms well above the clip value
    return params


def regrad(params: list[torch.nn.Parameter], step: int) -> None:
    gen = torch.Generator().manual_seed(100 + step)
    for p in params:
        p.grad = (torch.randn(p.shape, generator=gen) * 5).to(p.dtype)


class Holder:
    """Stands in for the LightningModule that keeps the step's norms."""


@pytest.mark.parametrize("make", ["torch_fused", "master_fused"])
def test_clipping_inside_the_kernel_matches_clipping_the_gradients_first(make: str) -> None:
    """Reference: fp32 AdamW on fp32 copies, gradients clipped by torch first. With bf16 parameters
    the comparison is on the fp32 masters, which are what an fp32 run's parameters would be."""
    dtype = torch.bfloat16 if make == "master_fused" else torch.float32
    ours = params_with_grads(0, dtype)
    ref = [torch.nn.Parameter(p.detach().float().clone()) for p in ours]
    kwargs = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    opt = (torch.optim.AdamW(ours, fused=True, **kwargs) if make == "torch_fused"
           else AdamWWithMasterWeights(ours, fused=True, **kwargs))
    ref_opt = torch.optim.AdamW(ref, foreach=False, **kwargs)
    holder = Holder()
    for step in range(5):
        regrad(ours, step)
        for r, p in zip(ref, ours):
            r.grad = p.grad.float().clone()
        expected = torch.nn.utils.clip_grad_norm_(ref, 1.0)
        total = clip_grad_norm_shared(holder, opt, ours, 1.0)
        assert hasattr(opt, "grad_scale")  # handed to the kernel, the gradients untouched here
        torch.testing.assert_close(total, expected, rtol=1e-5, atol=1e-5)
        opt.step(), ref_opt.step()
        drop_grad_scale(opt), forget_step_grad_norms(holder)
        assert not hasattr(opt, "grad_scale")
    for p, r in zip(ours, ref):
        updated = p if dtype == torch.float32 else opt.state[p]["master"]
        torch.testing.assert_close(updated, r.detach(), rtol=1e-5, atol=1e-6)
    start = params_with_grads(0, dtype)
    assert not any(torch.equal(p, s) for p, s in zip(ours, start))  # the updates did happen


def test_an_optimizer_without_the_kernel_gets_its_gradients_scaled() -> None:
    ours, ref = params_with_grads(1), params_with_grads(1)
    opt = torch.optim.AdamW(ours, foreach=True)
    expected = torch.nn.utils.clip_grad_norm_(ref, 0.5)
    total = clip_grad_norm_shared(Holder(), opt, ours, 0.5)
    assert not hasattr(opt, "grad_scale")
    torch.testing.assert_close(total, expected)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a.grad, b.grad)


def test_the_norms_are_computed_once_per_step_and_forgotten_after_it(monkeypatch) -> None:
    calls = []
    real = grad_norms.per_tensor_norms
    monkeypatch.setattr(grad_norms, "per_tensor_norms", lambda ts: calls.append(len(ts)) or real(ts))
    holder, params = Holder(), params_with_grads(2)
    first = grad_norms.step_grad_norms(holder, params)
    total = grad_norms.step_total_grad_norm(holder, list(reversed(params)))  # another order, same gradients
    assert len(calls) == 1
    torch.testing.assert_close(total, first.square().sum().sqrt())
    regrad(params, 0)  # new gradient tensors: the kept norms no longer describe them
    grad_norms.step_total_grad_norm(holder, params)
    assert len(calls) == 2
    forget_step_grad_norms(holder)
    assert not hasattr(holder, "_biomoe_step_grad_norms")


class CountNorms(L.Callback):
    def __init__(self, monkeypatch) -> None:
        self.per_step: list[int] = []
        self._calls = 0
        real = grad_norms.per_tensor_norms

        def counted(tensors):
            self._calls += 1
            return real(tensors)

        monkeypatch.setattr(grad_norms, "per_tensor_norms", counted)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.per_step.append(self._calls)
        self._calls = 0


def fit_losses(tmp_path: Path, callbacks: list[L.Callback], fused: bool, clip: float | None) -> list[float]:
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                      ffn_hidden_size=32)
    module = BioMoEModule(cfg, OptimConfig(lr=3e-2, warmup_steps=1, max_steps=6, fused=fused))
    losses: list[float] = []

    class Losses(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            losses.append(float(outputs["loss"]))

    dm = GenomeDataModule(fasta=str(ROOT / "data/lambda_virus.fa.gz"), seq_length=64, batch_size=4,
                          val_fraction=0.0, cache_dir=str(tmp_path / "cache"))
    trainer = L.Trainer(accelerator="cpu", max_steps=6, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, enable_checkpointing=False,
                        default_root_dir=tmp_path, gradient_clip_val=clip, callbacks=[*callbacks, Losses()])
    trainer.fit(module, datamodule=dm)
    return losses


@pytest.mark.parametrize("fused", [True, False])
def test_guard_and_clipping_share_one_norm_per_step_and_train_as_torch_clipping(tmp_path, monkeypatch, fused):
    counter = CountNorms(monkeypatch)
    ours = fit_losses(tmp_path, [NonFiniteGuard(), counter], fused=fused, clip=0.05)
    assert counter.per_step == [1] * 6  # the guard computes them, clipping reads them
    monkeypatch.undo()

    def torch_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        if gradient_clip_val:
            torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)

    monkeypatch.setattr(BioMoEModule, "configure_gradient_clipping", torch_clipping)
    reference = fit_losses(tmp_path, [NonFiniteGuard()], fused=fused, clip=0.05)
    unclipped = fit_losses(tmp_path, [NonFiniteGuard()], fused=fused, clip=None)
    assert ours == pytest.approx(reference, rel=1e-4, abs=1e-5)
    assert ours[-1] != pytest.approx(unclipped[-1], rel=1e-4)  # the clip value bites at this lr
