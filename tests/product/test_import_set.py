"""Inference commands import only what they run: no Lightning, torchmetrics, transformers,
torch's compiler, scipy or Transformer Engine on a CPU (each costs seconds before the first base
is scored), and matplotlib only where a plot is written. Each command runs on a tiny checkpoint
in a fresh interpreter, which then lists what it imported."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from biomoe.model.transformer import MoETransformer
from conftest import ROOT as REPO, random_dna, save_checkpoint
from helpers.import_set import imported_by

LAMBDA = REPO / "data" / "lambda_virus.fa.gz"


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


@pytest.mark.parametrize("command", [pytest.param(name, marks=() if name in FAST else pytest.mark.slow)
                                     for name in COMMANDS])
def test_an_inference_command_imports_only_what_it_runs(command, inputs, tmp_path):
    imported = imported_by(COMMANDS[command](inputs), tmp_path / "cache")
    assert imported <= PLOTS.get(command, set()), sorted(imported)
