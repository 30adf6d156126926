"""CUDA graphs of training steps give the losses eager steps give.

Two kinds: the whole step (forward, backward, clipping, master-weight AdamW and the router's bias
update) captured once and replayed (:class:`~biomoe.training.step.cuda_graph.GraphedStep`), and the
product's per-block graphs (``model.runtime.compile_mode: reduce-overhead``) in a Lightning fit.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch

from biomoe.build import build_model
from biomoe.data.datamodule import GenomeDataModule
from biomoe.model.config import ModelConfig, OptimConfig, RuntimeConfig
from biomoe.model.losses import masked_cross_entropy
from biomoe.training.optimization.master_adamw import AdamWWithMasterWeights
from biomoe.training.step.cuda_graph import GraphedStep
from biomoe.training.step.lightning_module import BioMoEModule

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
ROOT = Path(__file__).resolve().parents[2]
TORCH_KERNELS = dict(expert_backend="grouped", attention_backend="torch", norm_backend="torch",
                     router_backend="torch", dispatch_backend="torch")
STEPS = 20


def _config() -> ModelConfig:
    return ModelConfig(hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                       ffn_hidden_size=256, router_bias_update_rate=1e-3)


def _batches(config: ModelConfig) -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    out = []
    for _ in range(STEPS):
        seq = torch.randint(4, 8, (4, 257), generator=gen)
        out.append({"input_ids": seq[:, :-1].cuda(), "labels": seq[:, 1:].cuda()})
    return out


def _train(graphed: bool) -> tuple[list[float], dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    config = _config()
    with torch.device("cuda"):
        model = build_model(config, RuntimeConfig(**TORCH_KERNELS), torch.device("cuda")).model.to(torch.bfloat16)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = AdamWWithMasterWeights(params, lr=3e-3, weight_decay=0.1, fused=True)

    def step(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        out = model(batch["input_ids"])
        mask = torch.ones_like(batch["labels"], dtype=torch.bool)
        loss = masked_cross_entropy(out.logits, batch["labels"], mask) + config.aux_loss_coef * out.aux_loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        optimizer.step()
        for layer in model.moe_layers():
            layer.router.update_bias()
        return loss

    run = GraphedStep(step, optimizer, torch.device("cuda")) if graphed else None
    losses = []
    for batch in _batches(config):
        if run is None:
            optimizer.zero_grad(set_to_none=True)
            losses.append(step(batch).detach())
        else:
            losses.append(run(batch))
    if run is not None:
        assert run.captured and run.eager_steps == run.warmup_steps
    state = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    return [float(v) for v in losses], state


def test_a_captured_whole_step_trains_as_the_eager_step():
    eager_losses, eager_state = _train(graphed=False)
    graph_losses, graph_state = _train(graphed=True)
    assert graph_losses == pytest.approx(eager_losses, rel=1e-3, abs=1e-3)
    assert graph_losses[-1] < graph_losses[0] - 0.05  # the replays train: the weights move
    for key, value in eager_state.items():  # incl. the router biases, updated inside the graph
        torch.testing.assert_close(graph_state[key], value, rtol=2e-2, atol=2e-3, msg=key)


def test_a_captured_step_refuses_a_batch_of_another_shape():
    model = torch.nn.Linear(8, 1).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), fused=True, capturable=True)

    def step(batch):
        loss = model(batch["x"]).square().mean()
        loss.backward()
        optimizer.step()
        return loss

    run = GraphedStep(step, optimizer, torch.device("cuda"), warmup_steps=1)
    run({"x": torch.randn(4, 8, device="cuda")})
    with pytest.raises(ValueError, match=r"batch\['x'\].*same shape"):
        run({"x": torch.randn(5, 8, device="cuda")})


class LossRecorder(L.Callback):
    def __init__(self) -> None:
        self.losses: list[torch.Tensor] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(outputs["loss"].detach().float())


def _fit(tmp_path: Path, compile_mode: str | None) -> list[float]:
    torch.manual_seed(0)
    runtime = RuntimeConfig(**TORCH_KERNELS, compile=compile_mode is not None,
                            compile_mode=compile_mode or "default")
    module = BioMoEModule(_config(), OptimConfig(lr=1e-3, warmup_steps=2, max_steps=STEPS), runtime=runtime)
    dm = GenomeDataModule(fasta=str(ROOT / "data/lambda_virus.fa.gz"), seq_length=256, batch_size=4,
                          val_fraction=0.0, cache_dir=str(tmp_path / "cache"), num_workers=0)
    recorder = LossRecorder()
    trainer = L.Trainer(accelerator="gpu", devices=1, precision="bf16-true", max_steps=STEPS, logger=False,
                        enable_checkpointing=False, num_sanity_val_steps=0, gradient_clip_val=1.0,
                        enable_progress_bar=False, callbacks=[recorder], default_root_dir=tmp_path)
    trainer.fit(module, datamodule=dm)
    return [float(v) for v in recorder.losses]


def test_per_block_cuda_graphs_train_as_eager_blocks(tmp_path: Path):
    eager = _fit(tmp_path / "eager", None)
    graphs = _fit(tmp_path / "graphs", "reduce-overhead")
    assert len(eager) == len(graphs) == STEPS
    # the compiled blocks fuse elementwise work differently: close in bf16, not bitwise
    assert graphs == pytest.approx(eager, rel=3e-2)
    assert graphs[-1] < graphs[0]
