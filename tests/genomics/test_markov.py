"""Markov baseline: exact counts, exact per-position scores, train-only fitting, Lightning hook."""

from __future__ import annotations

import math
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch

from biomoe.genomics.markov import training_sequences
from biomoe.training.reports.markov_baseline import MarkovBaseline
from biomoe.model.config import ModelConfig, OptimConfig
from biomoe.data.datamodule import GenomeDataModule, split_regions
from biomoe.model.losses import LN2, masked_cross_entropy_sum
from biomoe.genomics.markov import MarkovModel, count_kmers
from biomoe.genomics.markov_report import markov_table
from biomoe.training.guards.time_budget import TimeBudget
from biomoe.training.step.lightning_module import BioMoEModule
from biomoe.data.tokenizer import NucleotideTokenizer
from conftest import ROOT

TOK = NucleotideTokenizer()


def brute_counts(seq: str, order: int) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for t in range(order, len(seq)):
        kmer = seq[t - order:t + 1]
        if set(kmer) <= set("ACGT"):
            counts[(kmer[:-1], kmer[-1])] = counts.get((kmer[:-1], kmer[-1]), 0) + 1
    return counts


def code(ctx: str) -> int:
    return int("".join(str("ACGT".index(c)) for c in ctx), 4) if ctx else 0


def test_count_kmers_matches_brute_force_and_skips_ambiguous():
    seq = "ACGTTGCANNACGGGTACGTAAACCCGRTTT"
    counts = count_kmers(TOK.encode(seq), 3)
    for order in range(4):
        expected = brute_counts(seq, order)
        got = {(ctx, "ACGT"[b]): int(counts[order][code(ctx), b])
               for ctx in {k[0] for k in expected} for b in range(4) if counts[order][code(ctx), b]}
        assert got == expected
        assert counts[order].sum() == sum(expected.values())


def test_logits_give_backed_off_add_alpha_probabilities():
    train = "ACGTACGTTTGACCA" * 5
    model = MarkovModel.fit([TOK.encode(train)], order=2, alpha=0.5, reverse_complement=False)
    query = "GANTCAG"
    labels = torch.from_numpy(TOK.encode(query))[None]
    logp = torch.log_softmax(model.logits(labels, 64), dim=-1)[0]
    for t, base in enumerate(query):
        if base not in "ACGT":
            continue
        ctx = query[max(0, t - 2):t]
        while ctx and not set(ctx) <= set("ACGT"):  # back off past the N
            ctx = ctx[1:]
        counts = brute_counts(train, len(ctx))
        row = [counts.get((ctx, b), 0) for b in "ACGT"]
        expected = math.log((row["ACGT".index(base)] + 0.5) / (sum(row) + 2.0))
        assert float(logp[t, TOK.token_to_id(base)]) == pytest.approx(expected, abs=1e-5), (t, ctx)


def test_markov_learns_a_periodic_sequence_and_not_noise():
    rng = np.random.default_rng(0)
    periodic = TOK.encode("ACGGT" * 400)
    noise = rng.integers(4, 8, 20000)
    for seq, low, high in ((periodic, 0.0, 0.05), (noise, 1.95, 2.05)):
        model = MarkovModel.fit([seq[:15000]], order=4, reverse_complement=False)
        labels = torch.from_numpy(seq[-1000:])[None]
        ce, n = masked_cross_entropy_sum(model.logits(labels, 64), labels, torch.ones_like(labels, dtype=torch.bool))
        bits = float(ce / n) / LN2
        assert low <= bits <= high


def test_reverse_complement_counts_both_strands():
    seq = TOK.encode("AAAAAAAAAC")
    fwd = MarkovModel.fit([seq], order=1, reverse_complement=False)
    both = MarkovModel.fit([seq], order=1, reverse_complement=True)
    t_row = 3  # context 'T' only exists on the reverse strand
    assert np.allclose(fwd.log_probs[1][t_row], math.log(0.25))
    assert both.log_probs[1][t_row].argmax() == 3  # T -> T


def lambda_datamodule(**kw) -> GenomeDataModule:
    args = dict(fasta=str(ROOT / "data/lambda_virus.fa.gz"), seq_length=128, batch_size=8,
                val_fraction=0.1, rc_prob=0.0)
    args.update(kw)
    return GenomeDataModule(**args)


def test_training_sequences_hold_no_validation_base():
    dm = lambda_datamodule()
    dm.setup("fit")
    train, val = split_regions(dm.genome, None, 0.1)
    seqs = list(training_sequences(dm))
    assert sum(len(s) for s in seqs) == sum(hi - lo for _, lo, hi in train)
    held_out = TOK.encode(dm.genome.fetch(val[0][0], val[0][1], val[0][2]))
    assert len(seqs[0]) == val[0][1] and not np.array_equal(seqs[0][-len(held_out):], held_out)


def tiny_module() -> BioMoEModule:
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                      ffn_hidden_size=32)
    return BioMoEModule(cfg, OptimConfig(lr=3e-3, warmup_steps=2))


def trainer(tmp_path: Path, callbacks, **kw) -> L.Trainer:
    return L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                     callbacks=callbacks, **kw)


def test_validation_logs_markov_baseline_equal_to_the_table(tmp_path):
    torch.manual_seed(0)
    dm = lambda_datamodule()
    baseline = MarkovBaseline(order=3)
    result = trainer(tmp_path, [baseline]).validate(tiny_module(), datamodule=dm, verbose=False)[0]
    table = markov_table(lambda_datamodule(), max_order=3)
    assert result["val/markov_bits_per_base"] == pytest.approx(table[3]["bits_per_base"], rel=1e-5)
    assert 1.8 < result["val/markov_bits_per_base"] < 2.1
    assert "val/bits_per_base" in result
    # Cached: a second validation reuses the value without scoring batches again.
    baseline.model = None
    second = trainer(tmp_path, [baseline]).validate(tiny_module(), datamodule=dm, verbose=False)[0]
    assert baseline.model is None
    assert second["val/markov_bits_per_base"] == result["val/markov_bits_per_base"]


def test_time_budget_fixes_steps_and_ends_the_schedule(tmp_path, monkeypatch):
    import types

    import biomoe.training.guards.time_budget as tb

    clock = iter(np.arange(1, 100) * 0.1)  # each reading of the clock advances 0.1 s
    monkeypatch.setattr(tb, "time", types.SimpleNamespace(perf_counter=lambda: float(next(clock))))
    torch.manual_seed(0)
    module = tiny_module()
    budget = TimeBudget(seconds=1.0, measure_from=2, measure_steps=3, reserve=0.0, round_to=4)
    fit = trainer(tmp_path, [budget], max_steps=10_000, limit_val_batches=0)
    fit.fit(module, datamodule=lambda_datamodule(rc_prob=0.5))
    # 3 steps in 0.1 s = 30 steps/s; 0.2 s used at step 5, 0.8 s left -> 5 + 24 = 29 -> 28 (multiple of 4)
    assert budget.total_steps == 28 and fit.global_step == 28
    lr = fit.optimizers[0].param_groups[0]["lr"]
    assert lr == pytest.approx(module.optim.lr * module.optim.min_lr_ratio, rel=0.05)
