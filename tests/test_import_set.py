"""Inference commands import only what they run: no Lightning, torchmetrics, transformers,
torch's compiler, scipy or Transformer Engine on a CPU (each costs seconds before the first base
is scored), and matplotlib only where a plot is written. Each command runs on a tiny checkpoint
in a fresh interpreter, which then lists what it imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from biomoe.model.transformer import MoETransformer
from conftest import random_dna, save_checkpoint

REPO = Path(__file__).resolve().parents[1]
LAMBDA = REPO / "data" / "lambda_virus.fa.gz"
FORBIDDEN = ("lightning", "pytorch_lightning", "torchmetrics", "transformers", "torch._dynamo", "scipy",
             "matplotlib", "transformer_engine")


@pytest.fixture(scope="module")
def inputs(tiny_config, tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("import_set")
    cfg = tiny_config()
    torch.manual_seed(0)
    ckpt = save_checkpoint(folder / "tiny.ckpt", MoETransformer(cfg), cfg, data={"seq_length": 64})
    sequence = random_dna(600, seed=3)
    fasta = folder / "g.fa"
    fasta.write_text(">chr1\n" + sequence + "\n")
    alt = "A" if sequence[99] != "A" else "C"
    variants = folder / "variants.tsv"
    variants.write_text(f"CHROM\tPOS\tREF\tALT\nchr1\t100\t{sequence[99]}\t{alt}\n")
    return {"ckpt": ckpt, "fasta": fasta, "variants": variants, "out": folder}


COMMANDS = {
    "score-fasta": lambda p: ["score-fasta", p["ckpt"], p["fasta"], "--out", p["out"] / "scores"],
    "score-fasta --repeat-fasta": lambda p: ["score-fasta", p["ckpt"], p["fasta"], "--out", p["out"] / "mixed",
                                             "--repeat-fasta", p["fasta"]],
    "embed": lambda p: ["embed", p["ckpt"], p["fasta"], "--out", p["out"] / "e.npz", "--pool", "mean"],
    "score-variants": lambda p: ["score-variants", p["ckpt"], p["fasta"], "--variants", p["variants"],
                                 "--out", p["out"] / "v.tsv"],
    "generate": lambda p: ["generate", p["ckpt"], "--length", "8", "--out", p["out"] / "gen.fa"],
    "mutations": lambda p: ["mutations", "--ckpt_path", p["ckpt"], LAMBDA, "--out", p["out"] / "mutations",
                            "--codons", "4"],
}
PLOTS = {"mutations": {"matplotlib"}}  # it writes roc.png
FAST = {"score-fasta"}  # the rest run in the slow suite (a few seconds each)


def imported_by(args: list, cache: Path, device: str = "cpu") -> set[str]:
    """The forbidden modules in ``sys.modules`` after ``cli.py ARGS`` ran in a fresh interpreter
    (also the GPU suite's check, with ``device="cuda"``)."""
    code = ("import runpy, sys\n"
            f"sys.argv = ['cli.py', *{[str(a) for a in args]!r}, '--no-progress', '--device', {device!r}]\n"
            "try:\n"
            "    runpy.run_path('cli.py', run_name='__main__')\n"
            "except SystemExit as exc:\n"
            "    assert exc.code in (0, None), exc.code\n"
            f"forbidden = {FORBIDDEN!r}\n"
            "print('@@' + ' '.join(sorted({f for f in forbidden for m in list(sys.modules)\n"
            "                              if m == f or m.startswith(f + '.')})))\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "BIOMOE_DEBUG": "1"}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return set(done.stdout.rpartition("@@")[2].split())


@pytest.mark.parametrize("command", [pytest.param(name, marks=() if name in FAST else pytest.mark.slow)
                                     for name in COMMANDS])
def test_an_inference_command_imports_only_what_it_runs(command, inputs, tmp_path):
    imported = imported_by(COMMANDS[command](inputs), tmp_path / "cache")
    assert imported <= PLOTS.get(command, set()), sorted(imported)
