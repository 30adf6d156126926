"""fp32 master weights in the optimizer: the model trains in bf16, the update is an fp32 AdamW."""

from __future__ import annotations

import copy

import pytest
import torch

from biomoe.training.optimization.master_adamw import AdamWWithMasterWeights
from biomoe.training.optimization.optimizer_choice import wants_master_weights


def _pair(seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(24, 16), torch.nn.Linear(16, 8)).to(torch.bfloat16)
    return copy.deepcopy(model).float(), model  # both start from the same (bf16-exact) values


def _step_all(pairs: list[tuple[torch.optim.Optimizer, torch.nn.Module]], grads: list[torch.Tensor]) -> None:
    """One optimizer step of each (optimizer, model) pair, every model given the same gradients."""
    for optimizer, model in pairs:
        for p, g in zip(model.parameters(), grads):
            p.grad = g.clone()
        optimizer.step()


@pytest.mark.parametrize("foreach", [False, True])
def test_masters_follow_a_reference_fp32_adamw_given_the_same_gradients(foreach):
    reference, model = _pair()
    groups = lambda m: [{"params": [m[0].weight, m[1].weight], "weight_decay": 0.1},  # noqa: E731
                        {"params": [m[0].bias, m[1].bias], "weight_decay": 0.0}]
    ref_opt = torch.optim.AdamW(groups(reference), lr=3e-3, betas=(0.9, 0.95), eps=1e-8, foreach=foreach)
    opt = AdamWWithMasterWeights(groups(model), lr=3e-3, betas=(0.9, 0.95), eps=1e-8, foreach=foreach)
    gen = torch.Generator().manual_seed(1)
    for _ in range(25):
        for ref_p, p in zip(reference.parameters(), model.parameters()):
            grad = torch.randn(p.shape, generator=gen).to(torch.bfloat16)  # what a bf16 backward gives
            p.grad = grad
            ref_p.grad = grad.float()
        ref_opt.step()
        opt.step()
    for ref_p, p in zip(reference.parameters(), model.parameters()):
        master = opt.state[p]["master"]
        assert master.dtype == torch.float32 and p.dtype == torch.bfloat16
        torch.testing.assert_close(master, ref_p.detach(), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(p.detach(), ref_p.detach().to(torch.bfloat16), rtol=0, atol=0)


def test_small_updates_are_not_rounded_away():
    """A bf16 AdamW cannot move a weight of 1.0 by 1e-4 (bf16's step there is 2^-7); the master can."""
    weight = torch.nn.Parameter(torch.ones(64, dtype=torch.bfloat16))
    plain = torch.nn.Parameter(torch.ones(64, dtype=torch.bfloat16))
    opt = AdamWWithMasterWeights([weight], lr=1e-4, weight_decay=0.0)
    plain_opt = torch.optim.AdamW([plain], lr=1e-4, weight_decay=0.0)
    for _ in range(100):
        weight.grad = torch.ones_like(weight)
        plain.grad = torch.ones_like(plain)
        opt.step()
        plain_opt.step()
    assert torch.all(plain == 1.0)  # every update rounded away
    assert opt.state[weight]["master"].mean().item() == pytest.approx(1.0 - 100 * 1e-4, rel=1e-4)
    assert torch.all(weight < 1.0)


def test_checkpoint_round_trip_keeps_fp32_state_and_continues_exactly():
    _, model = _pair()
    opt = AdamWWithMasterWeights(model.parameters(), lr=1e-3)
    twin = copy.deepcopy(model)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    saved = copy.deepcopy(opt.state_dict())
    twin.load_state_dict(model.state_dict())
    twin_opt = AdamWWithMasterWeights(twin.parameters(), lr=1e-3)
    twin_opt.load_state_dict(saved)
    for p in twin.parameters():
        assert all(twin_opt.state[p][k].dtype == torch.float32 for k in ("master", "exp_avg", "exp_avg_sq"))
    grads = [torch.randn_like(p) for p in model.parameters()]
    _step_all([(opt, model), (twin_opt, twin)], grads)
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.equal(a, b)
        assert torch.equal(opt.state[a]["master"], twin_opt.state[b]["master"])


def test_master_weights_are_chosen_for_low_precision_parameters_only():
    fp32 = [torch.nn.Parameter(torch.zeros(2))]
    bf16 = [torch.nn.Parameter(torch.zeros(2, dtype=torch.bfloat16))]
    assert not wants_master_weights(fp32, None)
    assert wants_master_weights(bf16, None)
    assert not wants_master_weights(bf16, False)


def test_bf16_true_fit_uses_master_weights_and_learns(tmp_path):
    """The Lightning path: trainer.precision bf16-true gives bf16 parameters, fp32 masters, and the
    loss falls on a learnable sequence."""
    from helpers.pattern_fit import fit_on_a_repeating_pattern

    from biomoe.model.config import ModelConfig, OptimConfig
    from biomoe.training.step.lightning_module import BioMoEModule

    torch.manual_seed(0)  # the initial weights must not depend on which tests ran before
    cfg = ModelConfig(vocab_size=16, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                      num_experts=4, top_k=2, ffn_hidden_size=32)
    module = BioMoEModule(cfg, OptimConfig(lr=1e-2, warmup_steps=1, max_steps=40), log_expert_load_every_n_steps=0)
    trainer, losses = fit_on_a_repeating_pattern(module, tmp_path, accelerator="cpu")
    optimizer = trainer.optimizers[0]
    assert isinstance(optimizer, AdamWWithMasterWeights)
    param = next(module.model.parameters())
    assert param.dtype == torch.bfloat16 and optimizer.state[param]["master"].dtype == torch.float32
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5


def test_master_weight_adamw_uses_the_reference_on_cpu_and_refuses_what_cpu_cannot_run():
    from biomoe.errors import ConfigError
    from biomoe.training.optimization.optimizer_choice import master_weight_adamw

    params = [torch.nn.Parameter(torch.zeros(4, dtype=torch.bfloat16))]
    kwargs = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, device=torch.device("cpu"), fused=False)
    chosen = master_weight_adamw([{"params": params}], backend="auto", moment_dtype="fp32", **kwargs)
    assert isinstance(chosen, AdamWWithMasterWeights)
    assert chosen.master_storage == "fp32"  # full masters unless remainders are asked for
    with pytest.raises(ConfigError, match="model.optim.backend: te"):
        master_weight_adamw([{"params": params}], backend="te", moment_dtype="fp32", **kwargs)
    compact = master_weight_adamw([{"params": params}], backend="torch", moment_dtype="bf16",
                                  master_storage="remainder", **kwargs)
    assert compact.master_storage == "remainder" and compact.moment_dtypes == (torch.bfloat16, torch.bfloat16)


def test_reference_resumes_from_a_portable_state_with_cpu_step_counts():
    """The layout TE's optimizer writes (per-parameter master/exp_avg/exp_avg_sq + a step) loads
    into the reference and continues exactly as the reference that wrote its own state."""
    _, model = _pair()
    opt = AdamWWithMasterWeights(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    portable = copy.deepcopy(opt.state_dict())
    for entry in portable["state"].values():
        entry["step"] = torch.tensor(float(entry["step"]))  # a plain CPU scalar, as TE's layout holds
    twin = copy.deepcopy(model)
    twin_opt = AdamWWithMasterWeights(twin.parameters(), lr=1e-3)
    twin_opt.load_state_dict(portable)
    grads = [torch.randn_like(p) for p in model.parameters()]
    _step_all([(opt, model), (twin_opt, twin)], grads)
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.equal(opt.state[a]["master"], twin_opt.state[b]["master"])


def _remainder_pair(seed: int = 0, **compact_kwargs):
    """Two bf16 models and optimizers from the same start: full fp32 masters, and remainders."""
    _, model = _pair(seed)
    twin = copy.deepcopy(model)
    full = AdamWWithMasterWeights(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    compact = AdamWWithMasterWeights(twin.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1,
                                     master_storage="remainder", **compact_kwargs)
    return (full, model), (compact, twin)


def test_remainder_storage_trains_exactly_as_full_fp32_masters():
    """The remainder and the bf16 weight are the fp32 master bit for bit, so the trajectory of the
    masters is the full-master one exactly; the weights differ from it at most by tie rounding."""
    (full, model), (compact, twin) = _remainder_pair()
    gen = torch.Generator().manual_seed(3)
    for _ in range(30):
        _step_all([(full, model), (compact, twin)],
                  [torch.randn(p.shape, generator=gen).to(torch.bfloat16) for p in model.parameters()])
    for a, b in zip(model.parameters(), twin.parameters()):
        assert set(compact.state[b]) == {"remainder", "exp_avg", "exp_avg_sq", "step"}
        assert compact.state[b]["remainder"].dtype == torch.int16
        assert torch.equal(compact.master(b), full.state[a]["master"])
        ulp = 2.0 ** (torch.floor(torch.log2(a.detach().float().abs().clamp(min=1e-30))) - 7)
        assert torch.all((a.float() - b.float()).abs() <= ulp)


def test_remainder_checkpoints_hold_full_masters_and_resume_either_way():
    (full, model), (compact, twin) = _remainder_pair()
    for _ in range(3):
        _step_all([(full, model), (compact, twin)], [torch.randn_like(p) for p in model.parameters()])
    saved = copy.deepcopy(compact.state_dict())
    assert all(set(e) == {"master", "exp_avg", "exp_avg_sq", "step"} and e["master"].dtype == torch.float32
               for e in saved["state"].values())
    assert all("remainder" in compact.state[p] for p in twin.parameters())  # saving left the live state as it was
    # the compact state resumes in a full-master optimizer, and a full one in a compact optimizer
    as_full_model = copy.deepcopy(twin)
    as_full = AdamWWithMasterWeights(as_full_model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    as_full.load_state_dict(saved)
    back_model = copy.deepcopy(model)
    back = AdamWWithMasterWeights(back_model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1,
                                  master_storage="remainder")
    back.load_state_dict(copy.deepcopy(full.state_dict()))
    grads = [torch.randn_like(p) for p in model.parameters()]
    _step_all([(full, model), (compact, twin), (as_full, as_full_model), (back, back_model)], grads)
    for a, b, c, d in zip(model.parameters(), twin.parameters(), as_full_model.parameters(), back_model.parameters()):
        reference = full.state[a]["master"]
        assert torch.equal(compact.master(b), reference)
        assert torch.equal(as_full.state[c]["master"], reference)
        assert torch.equal(back.master(d), reference)
        assert torch.equal(d, b)  # the loader set the weight from the saved master, as the compact run has it


def test_bf16_moments_are_stored_in_bf16_and_train_close_to_fp32_ones():
    (full, model), (compact, twin) = _remainder_pair(moment_dtypes=(torch.bfloat16, torch.bfloat16))
    gen = torch.Generator().manual_seed(4)
    for _ in range(20):
        _step_all([(full, model), (compact, twin)],
                  [torch.randn(p.shape, generator=gen).to(torch.bfloat16) for p in model.parameters()])
    for a, b in zip(model.parameters(), twin.parameters()):
        assert compact.state[b]["exp_avg"].dtype == compact.state[b]["exp_avg_sq"].dtype == torch.bfloat16
        moved = (compact.master(b) - full.state[a]["master"]).abs().max().item()
        assert 0 < moved < 0.02 * 20 * 3e-3  # rounded moments: different, within 2 % of 20 full steps
    saved = compact.state_dict()
    assert all(e["exp_avg"].dtype == torch.bfloat16 for e in saved["state"].values())


def test_bf16_true_validation_accumulates_held_out_loss_in_fp32(tmp_path):
    """Under bf16-true Lightning builds the module, metrics included, in bf16; the held-out
    cross-entropy must still be the fp32 token-weighted mean of the batches' fp32 losses."""
    import lightning as L

    from biomoe.model.config import ModelConfig, OptimConfig
    from biomoe.model.losses import masked_cross_entropy_sum
    from biomoe.training.step.lightning_module import BioMoEModule

    cfg = ModelConfig(vocab_size=16, hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2,
                      num_experts=2, top_k=1, ffn_hidden_size=32)
    gen = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(12):
        ids = torch.randint(4, 16, (4, 97), generator=gen)
        mask = (torch.rand(4, 96, generator=gen) > 0.3).float()
        batches.append({"input_ids": ids[:, :-1], "labels": ids[:, 1:], "loss_mask": mask})
    trainer = L.Trainer(accelerator="cpu", precision="bf16-true", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)
    module = BioMoEModule(cfg, OptimConfig(), log_expert_load_every_n_steps=0)
    logged = trainer.validate(module, dataloaders=torch.utils.data.DataLoader(batches, batch_size=None),
                              verbose=False)[0]["val/ce"]
    total = count = 0.0
    module.eval()
    with torch.no_grad(), trainer.precision_plugin.forward_context():  # as validate runs the forward
        for batch in batches:
            ce_sum, n = masked_cross_entropy_sum(module(batch["input_ids"]).logits, batch["labels"], batch["loss_mask"])
            total, count = total + float(ce_sum), count + float(n)
    assert logged == pytest.approx(total / count, rel=1e-5)


def test_bf16_first_moment_keeps_the_second_in_fp32_and_resumes_so():
    from biomoe.training.optimization.optimizer_choice import master_weight_adamw

    _, model = _pair()
    opt = master_weight_adamw([{"params": list(model.parameters())}], lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
                              backend="torch", moment_dtype="bf16-first", device=torch.device("cpu"), fused=False)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    twin = copy.deepcopy(model)
    twin_opt = master_weight_adamw([{"params": list(twin.parameters())}], lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
                                   backend="torch", moment_dtype="bf16-first", device=torch.device("cpu"), fused=False)
    twin_opt.load_state_dict(copy.deepcopy(opt.state_dict()))
    for p in twin.parameters():
        assert twin_opt.state[p]["exp_avg"].dtype == torch.bfloat16
        assert twin_opt.state[p]["exp_avg_sq"].dtype == torch.float32
    grads = [torch.randn_like(p) for p in model.parameters()]
    _step_all([(opt, model), (twin_opt, twin)], grads)
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.equal(opt.master(a), twin_opt.master(b))


def test_naming_te_adamw_with_a_broken_transformer_engine_says_why(monkeypatch):
    """A Transformer Engine that is installed but fails to import is not called "not installed"."""
    from biomoe.errors import ConfigError
    from biomoe.training.optimization import optimizer_choice

    monkeypatch.setattr(optimizer_choice, "te_import_error", lambda: "OSError: libcudnn.so.9: cannot open")
    monkeypatch.setattr(optimizer_choice, "te_installed", lambda: False)
    params = [torch.nn.Parameter(torch.zeros(4, dtype=torch.bfloat16))]
    with pytest.raises(ConfigError, match="installed but fails to import: OSError: libcudnn.so.9") as err:
        optimizer_choice.master_weight_adamw([{"params": params}], lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
                                             backend="te", moment_dtype="fp32", device=torch.device("cpu"),
                                             fused=False)
    assert "not installed" not in str(err.value)
