"""One bf16-true fit on one GPU, for tests/gpu/test_sharded_optimizer.py (a fresh process per fit:
each initialises its own process group). Prints one JSON line: the optimizer's class, whether the
parameters were DTensors, and the loss of every step.

    python tests/gpu/sharded_fit.py --shard --steps 20 --root DIR [--resume CKPT] [--save-every 10]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.distributed.tensor import DTensor

from biomoe.data.datamodule import GenomeDataModule
from biomoe.model.config import ModelConfig, OptimConfig, RuntimeConfig
from biomoe.parallel import ExpertParallelStrategy
from biomoe.training.guards.health import NonFiniteGuard
from biomoe.training.step.lightning_module import BioMoEModule

ROOT = Path(__file__).resolve().parents[2]


class Record(L.Callback):
    def __init__(self) -> None:
        self.losses: dict[int, float] = {}
        self.optimizer = ""
        self.dtensor = False

    def on_train_start(self, trainer, pl_module) -> None:
        self.optimizer = type(trainer.optimizers[0]).__name__
        self.dtensor = all(isinstance(p, DTensor) for p in pl_module.model.parameters())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses[trainer.global_step] = float(outputs["loss"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shard", action="store_true")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--resume")
    parser.add_argument("--save-every", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                      ffn_hidden_size=256)
    module = BioMoEModule(cfg, OptimConfig(lr=2e-3, warmup_steps=2, max_steps=args.steps),
                          runtime=RuntimeConfig(expert_backend="grouped"), log_expert_load_every_n_steps=0)
    dm = GenomeDataModule(fasta=str(ROOT / "data/lambda_virus.fa.gz"), seq_length=256, batch_size=8,
                          val_fraction=0.0, cache_dir=str(args.root / "cache"), num_workers=0)
    record = Record()
    callbacks: list[L.Callback] = [NonFiniteGuard(), record]
    if args.save_every:
        callbacks.append(ModelCheckpoint(dirpath=args.root / "ckpt", every_n_train_steps=args.save_every,
                                         save_top_k=-1, filename="step{step}"))
    strategy = ExpertParallelStrategy(shard_single_device=True) if args.shard else "auto"
    trainer = L.Trainer(accelerator="gpu", devices=1, strategy=strategy, precision="bf16-true",
                        max_steps=args.steps, logger=False, enable_checkpointing=bool(args.save_every),
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        limit_val_batches=0, gradient_clip_val=1.0, callbacks=callbacks,
                        default_root_dir=args.root)
    trainer.fit(module, datamodule=dm, ckpt_path=args.resume)
    print(json.dumps({"optimizer": record.optimizer, "dtensor": record.dtensor, "losses": record.losses}))


if __name__ == "__main__":
    main()
