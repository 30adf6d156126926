"""A compiled MoE model's gradients are eager's, step after step, also at a second sequence length
(a model trained at several lengths in one process meets one). On CUDA the compiled MoE blocks gave
gradients far from eager's at the second length while the loss agreed (docs/reliability.md,
"Known problem: compiled MoE gradients on CUDA"), in more steps of some runs than of others: the
comparison is repeated so that such a fault shows in one run of this test."""

from __future__ import annotations

import pytest
import torch

from biomoe.build import build_model
from biomoe.model.config import ModelConfig, RuntimeConfig
from tests.helpers.expert_reference import relative_error

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

BF16_BOUND = 2e-2
"""bf16 autocast: compiled and eager gradients land within 1e-2 of each other (fused kernels round
differently); a traced graph that computes something else is off by far more."""


REPEATS = 4
"""Steps compared at the second shape (no optimizer step between them: the weights stay equal)."""


def _backends() -> list[str]:
    names = ["grouped"]
    if torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9:
        from biomoe.compat.quack import quack_problem

        if quack_problem() is None:
            names.append("quack")
    return names


def _step(model, tokens) -> float:
    model.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(tokens)
    loss = out.logits.float().square().mean() + out.aux_loss + out.z_loss
    loss.backward()
    return loss.item()


@pytest.mark.parametrize("backend", _backends())
def test_a_compiled_moe_model_keeps_eager_gradients_step_after_step_and_at_a_second_shape(backend):
    torch._dynamo.reset()  # this test's own first shape, whatever ran before it
    cfg = ModelConfig(vocab_size=64, hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=8,
                      top_k=2, ffn_hidden_size=256)
    layers = dict(expert_backend=backend, attention_backend="torch", norm_backend="torch", router_backend="torch",
                  dispatch_backend="torch")
    device = torch.device("cuda")
    torch.manual_seed(0)
    with device:
        eager = build_model(cfg, RuntimeConfig(**layers), device).model
        compiled = build_model(cfg, RuntimeConfig(compile=True, **layers), device).model
    compiled.load_state_dict(eager.state_dict())
    _step(compiled, torch.randint(0, 64, (8, 512), device=device))  # the first shape
    for repeat in range(REPEATS):
        tokens = torch.randint(0, 64, (4, 256), device=device)  # the second shape
        want, got = _step(eager, tokens), _step(compiled, tokens)
        assert abs(got - want) < 1e-2 * abs(want)
        grads = {n: (p.grad.float(), q.grad.float()) for (n, p), (_, q) in zip(eager.named_parameters(),
                                                                              compiled.named_parameters())
                 if p.grad is not None}
        whole = relative_error(torch.cat([c.flatten() for _, c in grads.values()]),
                               torch.cat([e.flatten() for e, _ in grads.values()]))
        worst = sorted(((relative_error(c, e), n) for n, (e, c) in grads.items()), reverse=True)
        assert whole < BF16_BOUND, f"{backend}, step {repeat + 1}: {whole:.2e}; worst parameters {worst[:4]}"
