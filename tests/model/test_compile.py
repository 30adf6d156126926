"""torch.compile of the blocks: the same numbers, the same state_dict keys (checkpoints stay
interchangeable), and the LightningModule switch really compiles.

``aot_eager`` traces with dynamo and AOTAutograd exactly as the default backend does, minus the
code generation, so the test checks that our block code compiles without needing a C compiler.
"""

import pytest
import torch

from biomoe import ModelConfig, MoETransformer
from biomoe.model.backends import LayerBackends
from biomoe.model.config import RuntimeConfig
from biomoe.model.compile import apply_compile
from biomoe.training.step.lightning_module import BioMoEModule


LOOP = LayerBackends(experts="loop")


def tiny(**overrides) -> ModelConfig:
    base = dict(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                num_experts=4, top_k=2, ffn_hidden_size=32)
    base.update(overrides)
    return ModelConfig(**base)


@pytest.mark.parametrize("dtype", [pytest.param(torch.float32, marks=pytest.mark.slow), torch.bfloat16])
def test_compiled_blocks_match_eager_and_keep_keys(dtype):
    """fp32 on CPU takes the loop fallback under compile; bf16 traces torch._grouped_mm."""
    torch.manual_seed(0)
    eager = MoETransformer(tiny()).to(dtype)
    compiled = MoETransformer(tiny()).to(dtype)
    compiled.load_state_dict(eager.state_dict())
    apply_compile(compiled, backend="aot_eager", fullgraph=False)
    assert list(compiled.state_dict()) == list(eager.state_dict())
    ids = torch.randint(4, 8, (2, 24))
    losses = []
    for model in (eager, compiled):
        out = model(ids)
        loss = out.logits.float().log_softmax(-1).mean() + 0.01 * out.aux_loss
        loss.backward()
        losses.append(loss.detach())
    tol = dict(rtol=1e-4, atol=1e-6) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-3)
    torch.testing.assert_close(losses[1], losses[0], **tol)
    for (name, p_eager), p_compiled in zip(eager.named_parameters(), compiled.parameters()):
        torch.testing.assert_close(p_compiled.grad, p_eager.grad, **tol, msg=name)


def test_module_compile_switch_compiles_every_block():
    module = BioMoEModule(tiny(), runtime=RuntimeConfig(compile=True))
    module.configure_model()
    assert all(getattr(block, "_compiled_call_impl", None) is not None for block in module.model.blocks)
    plain = BioMoEModule(tiny())
    plain.configure_model()
    assert all(getattr(block, "_compiled_call_impl", None) is None for block in plain.model.blocks)


@pytest.mark.slow
def test_compile_with_activation_checkpointing_compiles_and_replays_dropout():
    """Compiling the checkpoint wrapper graph-broke on the router's statistics updates, so with
    activation_checkpointing nothing was compiled. Compiled inside the wrapper, the blocks are traced
    and give the gradients of the compiled model without checkpointing (dropout masks replayed)."""
    from biomoe.model.activation_checkpointing import apply_activation_checkpointing

    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch.manual_seed(0)
    ref = MoETransformer(tiny(dropout=0.3), LOOP)
    ids = torch.arange(48).reshape(2, 24) % 4 + 4
    grads = []
    for checkpointing in (False, True):
        model = MoETransformer(tiny(dropout=0.3), LOOP)
        model.load_state_dict(ref.state_dict())
        if checkpointing:
            apply_activation_checkpointing(model)
            counted = MoETransformer(tiny(), LOOP)
            apply_activation_checkpointing(counted)
            apply_compile(counted, backend=counting_backend)
            counted(ids).logits.sum().backward()
            assert graphs, "no block was compiled under activation checkpointing"
        apply_compile(model, backend="aot_eager")
        assert list(model.state_dict()) == list(ref.state_dict())
        torch.manual_seed(1)  # the same masks in both runs
        model(ids).logits.float().pow(2).mean().backward()
        grads.append({n.replace("_checkpoint_wrapped_module.", ""): p.grad for n, p in model.named_parameters()})
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, rtol=1e-5, atol=1e-6, msg=name)
