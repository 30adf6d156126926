"""Transformer Engine's FusedAdam as the master-weight AdamW: same numerics as the CPU reference,
checkpoints portable between the two, and what a bf16-true fit picks on a GPU."""

from __future__ import annotations

import copy

import pytest
import torch

from biomoe.backends.te.availability import te_installed
from biomoe.training.optimization.master_adamw import AdamWWithMasterWeights
from biomoe.training.optimization.optimizer_choice import master_weight_adamw

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not te_installed(), reason="needs Transformer Engine (pip install biomoe[te])"),
]


def _models(seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(96, 64), torch.nn.Linear(64, 32)).to("cuda", torch.bfloat16)
    return model, copy.deepcopy(model)


def _groups(model: torch.nn.Module) -> list[dict]:
    return [{"params": [model[0].weight, model[1].weight], "weight_decay": 0.1},
            {"params": [model[0].bias, model[1].bias], "weight_decay": 0.0}]


def _step_both(pairs, grads) -> None:
    for optimizer, model in pairs:
        for p, g in zip(model.parameters(), grads):
            p.grad = g.clone()
        optimizer.step()


def _train(pairs, steps: int, seed: int) -> None:
    """``steps`` optimizer steps of every pair on the same random bf16 gradients (what a bf16 backward gives)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    for _ in range(steps):
        model = pairs[0][1]
        grads = [torch.randn(p.shape, device="cuda", generator=gen).to(torch.bfloat16) for p in model.parameters()]
        _step_both(pairs, grads)


def _te(model, moment_dtype="fp32", master_storage="fp32"):
    return master_weight_adamw(_groups(model), lr=3e-3, betas=(0.9, 0.95), eps=1e-8, backend="te",
                               moment_dtype=moment_dtype, master_storage=master_storage,
                               device=torch.device("cuda"), fused=True)


def test_te_master_weights_follow_the_reference_adamw():
    te_model, ref_model = _models()
    te_opt = _te(te_model)
    ref_opt = AdamWWithMasterWeights(_groups(ref_model), lr=3e-3, betas=(0.9, 0.95), eps=1e-8, fused=True)
    assert type(te_opt).__name__ == "TEAdamWWithMasterWeights"
    _train([(te_opt, te_model), (ref_opt, ref_model)], steps=30, seed=1)
    te_state, ref_state = te_opt.state_dict()["state"], ref_opt.state_dict()["state"]
    for index in ref_state:
        for key in ("master", "exp_avg", "exp_avg_sq"):
            assert te_state[index][key].dtype == torch.float32
            torch.testing.assert_close(te_state[index][key], ref_state[index][key], rtol=1e-5, atol=1e-6)
        assert float(te_state[index]["step"]) == float(ref_state[index]["step"]) == 30
    for a, b in zip(te_model.parameters(), ref_model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=2 ** -7 * b.abs().max().item())


@pytest.mark.parametrize("direction", ["te-to-reference", "reference-to-te"])
def test_checkpoints_move_between_te_and_the_reference(direction):
    source_model, _ = _models()
    if direction == "te-to-reference":
        source = _te(source_model)
    else:
        source = AdamWWithMasterWeights(_groups(source_model), lr=3e-3, betas=(0.9, 0.95), fused=True)
    for _ in range(3):
        _step_both([(source, source_model)], [torch.randn_like(p) for p in source_model.parameters()])
    saved = copy.deepcopy(source.state_dict())
    target_model = copy.deepcopy(source_model)
    if direction == "te-to-reference":
        target = AdamWWithMasterWeights(_groups(target_model), lr=3e-3, betas=(0.9, 0.95), fused=True)
    else:
        target = _te(target_model)
    target.load_state_dict(saved)
    grads = [torch.randn_like(p) for p in source_model.parameters()]
    _step_both([(source, source_model), (target, target_model)], grads)
    src, dst = source.state_dict()["state"], target.state_dict()["state"]
    for index in src:
        torch.testing.assert_close(dst[index]["master"], src[index]["master"], rtol=1e-5, atol=1e-6)
        assert float(dst[index]["step"]) == float(src[index]["step"]) == 4


def test_bf16_moments_train_close_to_fp32_moments():
    fp32_model, bf16_model = _models()
    fp32_opt, bf16_opt = _te(fp32_model), _te(bf16_model, moment_dtype="bf16")
    _train([(fp32_opt, fp32_model), (bf16_opt, bf16_model)], steps=20, seed=2)
    a, b = fp32_opt.state_dict()["state"], bf16_opt.state_dict()["state"]
    for index in a:
        moved = (a[index]["master"] - b[index]["master"]).abs().max().item()
        assert moved < 0.02 * 20 * 3e-3  # within 2 % of 20 full-size Adam steps


def _te_remainder(model, moment_dtype="fp32"):
    return _te(model, moment_dtype, master_storage="remainder")


def test_te_remainders_train_exactly_as_full_masters():
    full_model, compact_model = _models()
    full = _te(full_model, master_storage="fp32")
    assert not full.store_param_remainders
    compact = _te_remainder(compact_model)
    _train([(full, full_model), (compact, compact_model)], steps=30, seed=5)
    assert all(compact.state[p]["master_param"].dtype == torch.int16 for p in compact_model.parameters())
    a, b = full.state_dict()["state"], compact.state_dict()["state"]
    for index in a:
        assert b[index]["master"].dtype == torch.float32
        assert torch.equal(b[index]["master"], a[index]["master"])  # the same fp32 update, bit for bit


@pytest.mark.parametrize("direction", ["te-remainder-to-reference", "reference-to-te-remainder"])
def test_remainder_checkpoints_move_between_te_and_the_reference(direction):
    source_model, _ = _models()
    if direction == "te-remainder-to-reference":
        source = _te_remainder(source_model)
    else:
        source = AdamWWithMasterWeights(_groups(source_model), lr=3e-3, betas=(0.9, 0.95), fused=True,
                                        master_storage="remainder")
    _train([(source, source_model)], steps=3, seed=6)
    saved = copy.deepcopy(source.state_dict())
    target_model = copy.deepcopy(source_model)
    if direction == "te-remainder-to-reference":
        target = AdamWWithMasterWeights(_groups(target_model), lr=3e-3, betas=(0.9, 0.95), fused=True)
    else:
        target = _te_remainder(target_model)
    target.load_state_dict(saved)
    _train([(source, source_model), (target, target_model)], steps=1, seed=7)
    src, dst = source.state_dict()["state"], target.state_dict()["state"]
    for index in src:
        torch.testing.assert_close(dst[index]["master"], src[index]["master"], rtol=1e-5, atol=1e-6)
        assert float(dst[index]["step"]) == float(src[index]["step"]) == 4


def test_bf16_moments_on_the_reference_follow_te_bf16_moments():
    te_model, ref_model = _models()
    te_opt = _te_remainder(te_model, moment_dtype="bf16")
    ref_opt = AdamWWithMasterWeights(_groups(ref_model), lr=3e-3, betas=(0.9, 0.95), eps=1e-8, fused=True,
                                     master_storage="remainder", moment_dtypes=(torch.bfloat16, torch.bfloat16))
    _train([(te_opt, te_model), (ref_opt, ref_model)], steps=20, seed=8)
    for p, q in zip(te_model.parameters(), ref_model.parameters()):
        assert te_opt.state[p]["exp_avg"].dtype == ref_opt.state[q]["exp_avg"].dtype == torch.bfloat16
    a, b = te_opt.state_dict()["state"], ref_opt.state_dict()["state"]
    for index in a:
        torch.testing.assert_close(a[index]["master"], b[index]["master"], rtol=1e-4, atol=1e-5)
