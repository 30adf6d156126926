"""The aux-loss-free expert bias follows each optimizer step's load, whatever the logging interval.

The bias update used to read the router's logging-window counts, which only the load logging
resets: the same run then moved its bias differently with ``log_expert_load_every_n_steps`` 1, 50
or 0 (never). The update now reads this step's counts (all micro-batches of it), so the runs agree.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch

from biomoe.data.datamodule import GenomeDataModule
from biomoe.model.config import ModelConfig, OptimConfig
from biomoe.training.step.lightning_module import BioMoEModule
from conftest import ROOT


def _biases_after_fit(tmp_path: Path, log_load_every: int, accumulate: int = 1) -> list[torch.Tensor]:
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                      ffn_hidden_size=32, router_bias_update_rate=0.01)
    module = BioMoEModule(cfg, OptimConfig(lr=3e-3, warmup_steps=2, max_steps=8),
                          log_expert_load_every_n_steps=log_load_every)
    data = GenomeDataModule(fasta=str(ROOT / "data/lambda_virus.fa.gz"), seq_length=64, batch_size=4,
                            val_fraction=0.0, rc_prob=0.0, cache_dir=str(tmp_path / "cache"), max_train_windows=64)
    trainer = L.Trainer(accelerator="cpu", max_steps=8, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
                        default_root_dir=tmp_path, accumulate_grad_batches=accumulate)
    trainer.fit(module, datamodule=data)
    return [layer.router.expert_bias.clone() for layer in module.model.moe_layers()]


def test_the_bias_trajectory_does_not_depend_on_the_logging_interval(tmp_path: Path) -> None:
    every_step = _biases_after_fit(tmp_path / "every", 1)
    assert any(bias.abs().sum() > 0 for bias in every_step)  # the bias really moves
    for interval in (0,):  # never: the window then spans the whole run
        other = _biases_after_fit(tmp_path / f"every{interval}", interval)
        assert all(torch.equal(a, b) for a, b in zip(every_step, other)), interval


def test_with_gradient_accumulation_too(tmp_path: Path) -> None:
    every_step = _biases_after_fit(tmp_path / "every", 1, accumulate=2)
    never = _biases_after_fit(tmp_path / "never", 0, accumulate=2)
    assert all(torch.equal(a, b) for a, b in zip(every_step, never))
