"""On a GPU, an inference command imports Transformer Engine only where its kernels are chosen,
and torch's compiler only where something compiles: ``--precision fp32`` runs torch kernels
throughout, so it imports neither (nor Lightning and its dependencies)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from biomoe.model.config import ModelConfig
from biomoe.model.transformer import MoETransformer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
REPO = Path(__file__).resolve().parents[2]
FORBIDDEN = ("transformer_engine", "lightning", "torchmetrics", "transformers", "scipy", "matplotlib",
             "torch._dynamo")


def imported_by(args: list[str], cache: Path) -> set[str]:
    code = ("import runpy, sys\n"
            f"sys.argv = ['cli.py', *{args!r}, '--no-progress', '--device', 'cuda']\n"
            "try:\n"
            "    runpy.run_path('cli.py', run_name='__main__')\n"
            "except SystemExit as exc:\n"
            "    assert exc.code in (0, None), exc.code\n"
            f"forbidden = {FORBIDDEN!r}\n"
            "print('@@' + ' '.join(sorted({f for f in forbidden for m in list(sys.modules)\n"
            "                              if m == f or m.startswith(f + '.')})))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "XDG_CACHE_HOME": str(cache)})
    assert done.returncode == 0, done.stderr[-3000:]
    return set(done.stdout.rpartition("@@")[2].split())


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
                            "--precision", "fp32"], tmp_path / "cache")
    assert not imported, sorted(imported)
