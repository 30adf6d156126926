"""On a GPU, ordinary training steps never synchronise the host with the device.

``torch.cuda.set_sync_debug_mode("error")`` turns every synchronising CUDA call (``.item()``,
``bool()`` of a device tensor, a copy from pageable host memory, ``nonzero``...) into an error.
It is on for whole step cycles — from one batch's start to the next's, so Lightning's progress-bar
and logger handling between steps is included — of steps that are neither logging nor checking
steps, with the shipped callbacks, gradient clipping, bf16 weights with fp32 master weights and
the torch kernels and quack's (Transformer Engine's grouped GEMMs take their split sizes on the host
by design).
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch

from biomoe.data.datamodule import GenomeDataModule
from biomoe.model.config import ModelConfig, OptimConfig, RuntimeConfig
from biomoe.training.guards.health import NonFiniteGuard, RouterCollapseMonitor
from biomoe.training.step.lightning_module import BioMoEModule

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
ROOT = Path(__file__).resolve().parents[2]


class SyncsAreErrors(L.Callback):
    """Sync debug mode "error" from the start of batch ``first`` to the start of batch ``last``."""

    def __init__(self, first: int, last: int) -> None:
        self.first, self.last = first, last

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.first:
            torch.cuda.set_sync_debug_mode("error")
        elif trainer.global_step == self.last:
            torch.cuda.set_sync_debug_mode("default")

    def on_exception(self, trainer, pl_module, exception):
        torch.cuda.set_sync_debug_mode("default")


def _quack_ready() -> bool:
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        return False
    from biomoe.compat.quack import quack_problem

    return quack_problem() is None


@pytest.mark.parametrize("experts", ["grouped", pytest.param("quack", marks=pytest.mark.skipif(
    not _quack_ready(), reason="needs quack-kernels on a Hopper GPU"))])
def test_ordinary_steps_do_not_synchronise(tmp_path: Path, experts: str):
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                      ffn_hidden_size=256, router_bias_update_rate=1e-3)
    runtime = RuntimeConfig(expert_backend=experts, attention_backend="torch", norm_backend="torch",
                            router_backend="torch", dispatch_backend="torch")
    module = BioMoEModule(cfg, OptimConfig(lr=1e-3, warmup_steps=2, max_steps=12), runtime=runtime,
                          log_expert_load_every_n_steps=10)
    dm = GenomeDataModule(fasta=str(ROOT / "data/lambda_virus.fa.gz"), seq_length=256, batch_size=4,
                          val_fraction=0.0, cache_dir=str(tmp_path / "cache"))
    callbacks = [NonFiniteGuard("stop", check_every_n_steps=10),
                 RouterCollapseMonitor(threshold=0.02, patience=3, check_every_n_steps=10),
                 SyncsAreErrors(first=2, last=8)]
    trainer = L.Trainer(accelerator="gpu", devices=1, precision="bf16-true", max_steps=12, logger=False,
                        enable_checkpointing=False, num_sanity_val_steps=0, log_every_n_steps=10,
                        gradient_clip_val=1.0, callbacks=callbacks, default_root_dir=tmp_path)
    try:
        trainer.fit(module, datamodule=dm)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert trainer.global_step == 12
