"""Packed batches carry their document offsets from the host, so a GPU forward never waits to find them."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import numpy as np
import torch

from biomoe.data.datamodule import GenomeDataModule
from biomoe.model.config import ModelConfig, OptimConfig
from biomoe.model.documents import DocumentLayout
from biomoe.data.document_offsets import OFFSETS_KEY, add_host_document_offsets, batch_documents
from biomoe.training.step.lightning_module import BioMoEModule
from conftest import ROOT


def _packed_positions(rng: np.random.Generator, rows: int, length: int) -> torch.Tensor:
    out = np.zeros((rows, length), dtype=np.int64)
    for r in range(rows):
        start = 0
        while start < length:
            size = int(rng.integers(1, length + 1))
            out[r, start:start + size] = np.arange(min(size, length - start))
            start += size
    return torch.from_numpy(out)


def test_host_offsets_equal_the_ones_the_device_path_finds() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        positions = _packed_positions(rng, int(rng.integers(1, 5)), int(rng.integers(1, 300)))
        batch = add_host_document_offsets({"input_ids": torch.zeros_like(positions), "position_ids": positions})
        starts = positions == 0
        starts[:, 0] = True
        cu_seqlens, longest = DocumentLayout._device_offsets(starts)
        offsets = batch[OFFSETS_KEY]
        assert torch.equal(offsets.cu_seqlens, cu_seqlens) and offsets.cu_seqlens.dtype == torch.int32
        assert offsets.max_seqlen == longest


def test_batches_without_packed_rows_pass_unchanged() -> None:
    plain = {"input_ids": torch.zeros(2, 8, dtype=torch.long)}
    assert add_host_document_offsets(dict(plain)).keys() == plain.keys()
    assert batch_documents(plain) is None
    assert add_host_document_offsets([torch.zeros(2)])[0].shape == (2,)


def test_forward_with_host_offsets_equals_the_forward_from_positions() -> None:
    torch.manual_seed(0)
    module = BioMoEModule(ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4,
                                      top_k=2, ffn_hidden_size=32), OptimConfig(max_steps=2))
    positions = _packed_positions(np.random.default_rng(1), 3, 40)
    batch = add_host_document_offsets({"input_ids": torch.randint(0, 4, (3, 40)), "position_ids": positions})
    documents = batch_documents(batch)
    assert documents is not None and documents.max_seqlen == batch[OFFSETS_KEY].max_seqlen
    with torch.no_grad():
        from_host = module.forward_batch(batch).logits
        from_positions = module(batch["input_ids"], positions).logits
    torch.testing.assert_close(from_host, from_positions)


class LayoutsSeen(L.Callback):
    def __init__(self) -> None:
        self.given: list[bool] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        offsets = batch.get(OFFSETS_KEY)
        self.given.append(offsets is not None and isinstance(offsets.max_seqlen, int))


def test_training_batches_reach_the_step_with_their_offsets(tmp_path: Path) -> None:
    module = BioMoEModule(ModelConfig(hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, num_experts=4,
                                      top_k=2, ffn_hidden_size=32), OptimConfig(max_steps=3, warmup_steps=1))
    dm = GenomeDataModule(fasta=str(ROOT / "data/lambda_virus.fa.gz"), seq_length=64, batch_size=4,
                          val_fraction=0.0, cache_dir=str(tmp_path / "cache"))
    seen = LayoutsSeen()
    trainer = L.Trainer(accelerator="cpu", max_steps=3, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, callbacks=[seen],
                        default_root_dir=tmp_path)
    trainer.fit(module, datamodule=dm)
    assert seen.given == [True, True, True]
