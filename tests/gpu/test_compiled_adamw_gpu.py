"""The compiled master-weight AdamW on a GPU: the kernels torch.compile generates give the eager
function's numbers and TE's, and a Lightning fit compiles the update once and keeps it while the
learning rate changes."""

from __future__ import annotations

import copy

import pytest
import torch

from biomoe.checkpoint.optimizer_state import MOMENT_DTYPES
from biomoe.training.optimization.compiled_adamw import CompiledAdamWWithMasterWeights

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(96, 64), torch.nn.Linear(64, 32)).to("cuda", torch.bfloat16)


def _groups(model: torch.nn.Module) -> list[dict]:
    return [{"params": [model[0].weight, model[1].weight], "weight_decay": 0.1},
            {"params": [model[0].bias, model[1].bias], "weight_decay": 0.0}]


def _train(pairs, steps: int, seed: int, skip_step: int | None = None) -> None:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    for step in range(steps):
        grads = [torch.randn(p.shape, generator=gen, device="cuda").to(torch.bfloat16)
                 for p in pairs[0][1].parameters()]
        for optimizer, model in pairs:
            for p, g in zip(model.parameters(), grads):
                p.grad = g.clone()
            optimizer.grad_scale = torch.tensor(1.7, device="cuda")
            optimizer.found_inf = torch.tensor(1.0 if step == skip_step else 0.0, device="cuda")
            for group in optimizer.param_groups:
                group["lr"] = 1e-2 * (1 + step) / steps  # a schedule: must not recompile
            optimizer.step()


@pytest.mark.parametrize("storage,moments", [("fp32", "fp32"), ("remainder", "fp32"), ("fp32", "bf16-first")])
def test_generated_kernels_give_the_eager_update(storage, moments):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model = _model(0)
    twin = copy.deepcopy(model)
    kwargs = dict(lr=1e-2, betas=(0.9, 0.95), master_storage=storage, moment_dtypes=MOMENT_DTYPES[moments])
    compiled = CompiledAdamWWithMasterWeights(_groups(model), compile_update=True, **kwargs)
    eager = CompiledAdamWWithMasterWeights(_groups(twin), compile_update=False, **kwargs)
    _train([(compiled, model), (eager, twin)], steps=20, seed=1, skip_step=9)
    for p, q in zip(model.parameters(), twin.parameters()):
        ours, theirs = compiled.master(p), eager.master(q)
        assert float(compiled.state[p]["step"]) == 19.0
        if moments == "fp32":
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)
            continue
        # A moment stored in bf16 is rounded at every step: where the generated kernel's fp32
        # arithmetic differs from eager's by an fp32 ulp at a bf16 rounding boundary, the stored
        # moment differs by a bf16 ulp (2**-8 relative), and so do the updates made from it. Bound:
        # each of the 19 applied updates (at most lr = 1e-2 each) off by two bf16 ulps, on few elements.
        diff = (ours - theirs).abs()
        assert float(diff.max()) <= 19 * 1e-2 * 2 * 2.0 ** -8
        assert float((diff > 1e-7 + 1e-5 * theirs.abs()).float().mean()) < 0.05
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert frames <= 2, f"{frames} graphs for two parameter groups: the update recompiled"


def test_compiled_update_follows_te_fused_adam():
    pytest.importorskip("transformer_engine")
    from biomoe.backends.te.optim import TEAdamWWithMasterWeights

    model = _model(2)
    twin = copy.deepcopy(model)
    compiled = CompiledAdamWWithMasterWeights(_groups(model), lr=1e-2, betas=(0.9, 0.95))
    te = TEAdamWWithMasterWeights(_groups(twin), lr=1e-2, betas=(0.9, 0.95))
    gen = torch.Generator(device="cuda").manual_seed(3)
    for _ in range(20):
        grads = [torch.randn(p.shape, generator=gen, device="cuda").to(torch.bfloat16) for p in model.parameters()]
        for opt, net in ((compiled, model), (te, twin)):
            for p, g in zip(net.parameters(), grads):
                p.grad = g.clone()
            opt.step()
    te_masters = te.state_dict()["state"]  # indexed in the groups' order of parameters
    for index, p in enumerate(p for group in _groups(model) for p in group["params"]):
        torch.testing.assert_close(compiled.master(p), te_masters[index]["master"].float(), rtol=1e-5, atol=1e-6)


def test_a_bf16_true_fit_with_the_compiled_backend_learns(tmp_path):
    from helpers.pattern_fit import fit_on_a_repeating_pattern

    from biomoe.model.config import ModelConfig, OptimConfig
    from biomoe.training.step.lightning_module import BioMoEModule

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=16, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                      num_experts=4, top_k=2, ffn_hidden_size=64)
    module = BioMoEModule(cfg, OptimConfig(lr=1e-2, warmup_steps=5, max_steps=40, backend="compiled"),
                          log_expert_load_every_n_steps=0)
    trainer, losses = fit_on_a_repeating_pattern(module, tmp_path, accelerator="gpu", devices=1,
                                                 gradient_clip_val=1.0)
    assert isinstance(trainer.optimizers[0], CompiledAdamWWithMasterWeights)
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert frames <= 2, f"{frames} graphs for two parameter groups: the update recompiled"
