"""The compiled master-weight AdamW (model.optim.backend: compiled): the update function it hands to
torch.compile, run eagerly here, against torch's AdamW on fp32 parameters and against the
reference master-weight optimizer, with clipping, skipped steps, remainders, bf16 moments and
checkpoints."""

from __future__ import annotations

import copy

import pytest
import torch

from biomoe.training.optimization.compiled_adamw import CompiledAdamWWithMasterWeights
from biomoe.training.optimization.master_adamw import AdamWWithMasterWeights
from biomoe.training.optimization.optimizer_choice import master_weight_adamw


def _models(seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(24, 16), torch.nn.Linear(16, 8)).to(torch.bfloat16)
    return copy.deepcopy(model).float(), model  # the same (bf16-exact) starting values


def _groups(model: torch.nn.Module) -> list[dict]:
    return [{"params": [model[0].weight, model[1].weight], "weight_decay": 0.1},
            {"params": [model[0].bias, model[1].bias], "weight_decay": 0.0}]


def _grads(model: torch.nn.Module, gen: torch.Generator, scale: float = 1.0) -> list[torch.Tensor]:
    return [(torch.randn(p.shape, generator=gen) * scale).to(torch.bfloat16) for p in model.parameters()]


def test_compiled_update_follows_fp32_adamw_given_the_same_gradients():
    reference, model = _models()
    ref_opt = torch.optim.AdamW(_groups(reference), lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
    opt = CompiledAdamWWithMasterWeights(_groups(model), lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(1)
    for _ in range(25):
        for ref_p, p, grad in zip(reference.parameters(), model.parameters(), _grads(model, gen)):
            p.grad, ref_p.grad = grad, grad.float()
        ref_opt.step()
        opt.step()
    for ref_p, p in zip(reference.parameters(), model.parameters()):
        master = opt.state[p]["master"]
        assert master.dtype == torch.float32 and p.dtype == torch.bfloat16
        torch.testing.assert_close(master, ref_p.detach(), rtol=1e-5, atol=1e-6)
        assert torch.equal(p.detach(), master.to(torch.bfloat16))  # the weight is its master rounded


@pytest.mark.parametrize("storage,moments", [("fp32", "fp32"), ("remainder", "fp32"), ("fp32", "bf16"),
                                             ("remainder", "bf16-first")])
def test_compiled_update_matches_the_reference_optimizer_with_clipping_and_a_skipped_step(storage, moments):
    """grad_scale (the clip coefficient) divides the gradients; found_inf = 1 leaves weights,
    masters, moments and step counts untouched. The reference is the master-weight optimizer on
    torch's fused kernel, which reads both the same way."""
    from biomoe.checkpoint.optimizer_state import MOMENT_DTYPES

    _, model = _models(2)
    twin = copy.deepcopy(model)
    kwargs = dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-8, master_storage=storage, moment_dtypes=MOMENT_DTYPES[moments])
    compiled = CompiledAdamWWithMasterWeights(_groups(model), **kwargs)
    reference = AdamWWithMasterWeights(_groups(twin), fused=True, **kwargs)
    gen = torch.Generator().manual_seed(5)
    for step in range(12):
        skip = step == 7
        for opt, net, grads in ((compiled, model, _grads(model, gen, scale=3.0)), (reference, twin, None)):
            for p, g in zip(net.parameters(), grads or [q.grad for q in model.parameters()]):
                p.grad = g.clone()
            opt.grad_scale = torch.tensor(2.5)
            opt.found_inf = torch.tensor(1.0 if skip else 0.0)
        before = [p.detach().clone() for p in model.parameters()]
        compiled.step()
        reference.step()
        if skip:
            assert all(torch.equal(b, p.detach()) for b, p in zip(before, model.parameters()))
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(compiled.master(p), reference.master(q), rtol=2e-5, atol=1e-6)
        assert float(compiled.state[p]["step"]) == float(reference.state[q]["step"]) == 11.0
        for key in ("exp_avg", "exp_avg_sq"):
            assert compiled.state[p][key].dtype == reference.state[q][key].dtype
            torch.testing.assert_close(compiled.state[p][key].float(), reference.state[q][key].float(),
                                       rtol=1e-2 if moments != "fp32" else 2e-5, atol=1e-6)


def test_grad_scale_divides_the_gradient_before_the_moments():
    """Adam hardly notices a constant gradient scale unless eps is comparable to the gradients,
    so eps is large here: the scaled step must equal AdamW on gradients / scale, not on gradients."""
    reference, model = _models(4)
    unscaled = copy.deepcopy(reference)
    ref_opt = torch.optim.AdamW(_groups(reference), lr=1e-2, eps=0.5)
    unscaled_opt = torch.optim.AdamW(_groups(unscaled), lr=1e-2, eps=0.5)
    opt = CompiledAdamWWithMasterWeights(_groups(model), lr=1e-2, eps=0.5)
    gen = torch.Generator().manual_seed(7)
    for _ in range(3):
        for ref_p, raw_p, p, grad in zip(reference.parameters(), unscaled.parameters(), model.parameters(),
                                         _grads(model, gen)):
            p.grad, ref_p.grad, raw_p.grad = grad, grad.float() / 4.0, grad.float()
        opt.grad_scale = torch.tensor(4.0)
        for optimizer in (ref_opt, unscaled_opt, opt):
            optimizer.step()
    for ref_p, raw_p, p in zip(reference.parameters(), unscaled.parameters(), model.parameters()):
        torch.testing.assert_close(opt.master(p), ref_p.detach(), rtol=1e-5, atol=1e-6)
        assert not torch.allclose(opt.master(p), raw_p.detach(), rtol=1e-4, atol=1e-5)


def test_compiled_checkpoints_resume_on_the_reference_and_back():
    _, model = _models(3)
    twin = copy.deepcopy(model)
    compiled = CompiledAdamWWithMasterWeights(_groups(model), lr=1e-2, master_storage="remainder")
    gen = torch.Generator().manual_seed(6)
    for _ in range(4):
        for p, g in zip(model.parameters(), _grads(model, gen)):
            p.grad = g
        compiled.step()
    state = copy.deepcopy(compiled.state_dict())
    assert all("master" in entry and entry["master"].dtype == torch.float32 for entry in state["state"].values())
    twin.load_state_dict(model.state_dict())
    reference = AdamWWithMasterWeights(_groups(twin), lr=1e-2)
    reference.load_state_dict(state)
    back = CompiledAdamWWithMasterWeights(_groups(copy.deepcopy(model)), lr=1e-2)
    back.load_state_dict(state)
    grads = _grads(model, gen)
    for opt, net in ((compiled, model), (reference, twin)):
        for p, g in zip(net.parameters(), grads):
            p.grad = g.clone()
        opt.step()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(compiled.master(p), reference.master(q), rtol=2e-5, atol=1e-6)
        assert torch.equal(p.detach(), q.detach()) or torch.allclose(p.float(), q.float(), atol=1e-2)


def test_the_compiled_backend_is_chosen_by_name_and_unknown_names_are_refused():
    from biomoe.errors import ConfigError
    from biomoe.model.config import OptimConfig

    _, model = _models()
    opt = master_weight_adamw(_groups(model), lr=1e-3, betas=(0.9, 0.99), eps=1e-8, backend="compiled",
                              moment_dtype="bf16-first", device=torch.device("cpu"), fused=False)
    assert isinstance(opt, CompiledAdamWWithMasterWeights)
    assert opt.moment_dtypes == (torch.bfloat16, torch.float32)
    with pytest.raises(ConfigError, match="model.optim.backend: 'fused' is not one of"):
        OptimConfig(backend="fused")


@pytest.mark.parametrize("storage", ["fp32", "remainder"])
def test_sharded_parameters_are_updated_through_their_local_shards(tmp_path, storage):
    """FSDP2 parameters are DTensors: the update runs on each rank's shard, and the result (weights,
    masters, a checkpoint) is the one the same optimizer gives plain tensors."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        _, plain = _models(5)
        sharded = [torch.nn.Parameter(distribute_tensor(p.detach().clone(), mesh, [Shard(0)]))
                   for p in plain.parameters()]
        opt_plain = CompiledAdamWWithMasterWeights(plain.parameters(), lr=1e-2, master_storage=storage)
        opt_sharded = CompiledAdamWWithMasterWeights(sharded, lr=1e-2, master_storage=storage)
        gen = torch.Generator().manual_seed(8)
        for _ in range(4):
            for p, q, g in zip(plain.parameters(), sharded, _grads(plain, gen)):
                p.grad = g
                q.grad = distribute_tensor(g.clone(), mesh, [Shard(0)])
            opt_plain.step()
            opt_sharded.step()
        for p, q in zip(plain.parameters(), sharded):
            assert isinstance(q, DTensor) and isinstance(opt_sharded.master(q), DTensor)
            assert torch.equal(q.full_tensor(), p.detach())
            assert torch.equal(opt_sharded.master(q).full_tensor(), opt_plain.master(p))
        saved = opt_sharded.state_dict()["state"][0]
        assert saved["master"].dtype == torch.float32 and isinstance(saved["master"], DTensor)
    finally:
        dist.destroy_process_group()
