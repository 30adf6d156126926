"""On a GPU, an inference command imports Transformer Engine only where its kernels are chosen,
and torch's compiler only where something compiles: ``--precision fp32`` runs torch kernels
throughout, so it imports neither (nor Lightning and its dependencies)."""

from __future__ import annotations

import pytest
import torch

from biomoe.model.config import ModelConfig
from biomoe.model.transformer import MoETransformer
from helpers.import_set import imported_by

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_fp32_inference_on_a_gpu_imports_neither_transformer_engine_nor_lightning(tmp_path):
    cfg = ModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                      ffn_hidden_size=64)
    torch.manual_seed(0)
    model = MoETransformer(cfg)
    ckpt = tmp_path / "m.ckpt"
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                "hyper_parameters": {"config": cfg}}, ckpt)
    fasta = tmp_path / "g.fa"
    fasta.write_text(">chr1\n" + "ACGT" * 500 + "\n")
    imported = imported_by(["score-fasta", str(ckpt), str(fasta), "--out", str(tmp_path / "s"),
                            "--precision", "fp32"], tmp_path / "cache", device="cuda")
    assert not imported, sorted(imported)
