"""Inference on a GPU: the bf16 / TE path of the scoring commands against fp32 on a real genome,
with a model trained here for a few hundred steps (a random model predicts ~2 bits everywhere,
which would hide a precision problem)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from biomoe.backends.te.availability import te_installed
from biomoe.data.sources.registry import open_reader
from biomoe.data.tokenizer import BOS_ID, NucleotideTokenizer
from biomoe.inference.load import load_for_inference
from biomoe.inference.score_fasta import score_genome, summary_rows
from biomoe.model.config import ModelConfig
from biomoe.model.losses import masked_cross_entropy
from biomoe.model.transformer import MoETransformer

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not te_installed(), reason="needs Transformer Engine (pip install biomoe[te])"),
]
GENOME = Path(__file__).resolve().parents[2] / "data" / "yeast_chrI.fna.gz"
WINDOW = 512


def _bits(per_base: dict[str, np.ndarray]) -> float:
    rows = summary_rows(per_base)
    return -sum(r["log_likelihood"] for r in rows) / np.log(2) / sum(r["scored_bases"] for r in rows)


@pytest.fixture(scope="module")
def trained_checkpoint(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=256, num_layers=4, num_heads=4, num_kv_heads=2, num_experts=8, top_k=2,
                      ffn_hidden_size=512)
    model = MoETransformer(cfg).cuda()
    genome = open_reader([GENOME])
    ids = NucleotideTokenizer().encode(genome.fetch(genome.contigs[0].name, 0, genome.contigs[0].length))
    ids = torch.from_numpy(ids).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for _ in range(300):
        starts = torch.randint(0, ids.numel() - WINDOW, (32,), device="cuda")
        labels = torch.stack([ids[s:s + WINDOW] for s in starts.tolist()])
        inputs = torch.cat([torch.full_like(labels[:, :1], BOS_ID), labels[:, :-1]], dim=1)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(inputs).logits
        loss = masked_cross_entropy(logits, labels, NucleotideTokenizer.unambiguous_mask(labels))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    path = tmp_path_factory.mktemp("ckpt") / "trained.ckpt"
    torch.save({"state_dict": {f"model.{k}": v.cpu() for k, v in model.state_dict().items()},
                "hyper_parameters": {"config": cfg}}, path)
    return path


TE_LAYERS = {"norm_backend": "te", "attention_backend": "te", "router_backend": "te", "dispatch_backend": "te"}
TORCH_PATHS = {"norm": "torch nn.RMSNorm", "attention": "torch SDPA", "router": "torch", "dispatch": "torch argsort"}
TE_PATHS = {"norm": "te.RMSNorm", "attention": "te.DotProductAttention", "router": "te fused_topk + fused aux loss",
            "dispatch": "te moe_permute/unpermute"}


@pytest.mark.parametrize("asked, layers", [(None, TORCH_PATHS), (TE_LAYERS, TE_PATHS)],
                         ids=["default-torch-layers", "te-layers-asked-for"])
def test_bf16_scores_a_genome_as_fp32_does_on_the_kernels_it_chose(trained_checkpoint, asked, layers):
    """bf16 by default runs torch's layer kernels (INFERENCE_LAYER_KERNELS); TE's when asked for.
    Either way it scores the genome as fp32 does."""
    genome = open_reader([GENOME])
    fp32 = load_for_inference(trained_checkpoint, "cuda", "fp32", announce=print)
    bf16 = load_for_inference(trained_checkpoint, "cuda", overrides=asked, announce=print)
    paths = bf16.built.selection.paths
    assert bf16.dtype == torch.bfloat16 and {k: paths[k] for k in layers} == layers, paths
    reference = _bits(score_genome(fp32, genome, WINDOW))
    fast = _bits(score_genome(bf16, genome, WINDOW))
    assert reference < 1.99  # it learnt something: the precision gap is measured on a real model
    assert abs(fast - reference) <= 0.002, (fast, reference)

