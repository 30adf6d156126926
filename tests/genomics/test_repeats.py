"""The repeat expert: training k-mer counts, the causal mixture, and `repeat-mix` end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from biomoe.cli.main import main
from biomoe.model.config import ConfigError
from biomoe.model.transformer import MoETransformer
from biomoe.genomics.repeat_expert import RepeatTable, default_k, mixture_log_likelihood
from biomoe.data.tokenizer import A_ID, NucleotideTokenizer
from conftest import ROOT, random_dna, save_checkpoint

TOK = NucleotideTokenizer()


def ids(seq: str) -> np.ndarray:
    return TOK.encode(seq)


def test_table_counts_both_strands_and_skips_ambiguous_contexts():
    table = RepeatTable.fit([ids("ACGTACGTT"), ids("GGNAC")], k=3)
    labels = torch.from_numpy(ids("ACGTAC"))[None]
    counts = table.next_base_counts(labels)[0]
    assert counts[:3].sum() == 0  # fewer than k bases of context in the window
    # "ACG" -> T twice on the forward strand; the reverse complement AACGTACGT adds ACG -> T twice more
    assert counts[3].tolist() == [0, 0, 0, 4]
    # context "CGT" -> A once forward (CGTA), T once forward (CGTT); reverse: ACGT|ACGT -> CGT->A once
    assert counts[4].tolist() == [2, 0, 0, 1]
    assert counts[5].tolist() == [0, 2, 0, 0]  # "GTA" -> C on both strands
    assert len(RepeatTable.fit([ids("GGNAC")], k=2)) == 0  # every 3-mer there holds the N or ends
    with pytest.raises(ValueError, match="k must be"):
        RepeatTable.fit([ids("ACGT")], k=0)


def test_default_k_grows_with_the_genome():
    assert default_k(4_445_028) == 18  # E. coli's training split
    assert default_k(50_000) < default_k(5_000_000) < default_k(3_000_000_000) <= 31


def _uniform_log_probs(batch: int, length: int) -> torch.Tensor:
    log_probs = torch.full((batch, length, 16), -1e4)
    log_probs[..., A_ID:A_ID + 4] = np.log(0.25)
    return log_probs


def test_mixture_without_counts_is_the_base_model():
    labels = torch.from_numpy(ids(random_dna(50, 1)))[None]
    base = torch.log_softmax(torch.randn(1, 50, 16), -1)
    mixed, weight = mixture_log_likelihood(base, labels, torch.zeros(1, 50, 4))
    torch.testing.assert_close(mixed, base.gather(-1, labels.unsqueeze(-1)).squeeze(-1))
    assert torch.all(weight <= 0.5 + 1e-6)


def test_mixture_is_a_causal_distribution():
    """The weight at t uses bases before t only, so over the four possible bases at t the mixed
    probabilities sum to 1, and changing base t leaves every earlier output alone."""
    torch.manual_seed(0)
    labels = torch.from_numpy(ids(random_dna(40, 2)))[None].repeat(4, 1)
    labels[:, 25] = torch.arange(A_ID, A_ID + 4)  # the four alternatives at t = 25
    base = torch.log_softmax(torch.randn(1, 40, 16), -1).repeat(4, 1, 1)
    counts = torch.randint(0, 3, (1, 40, 4)).float().repeat(4, 1, 1)
    counts[:, 25] = torch.tensor([1.0, 2.0, 0.0, 1.0])  # the expert has an opinion at t
    mixed, weight = mixture_log_likelihood(base, labels, counts, switch=0.05, smoothing=0.1)
    acgt_mass = base[0, 25, A_ID:A_ID + 4].exp().sum()
    w = weight[0, 25]
    # bases get (1-w)·p_base + w·p_repeat; the rest of the vocabulary keeps (1-w)·p_base
    torch.testing.assert_close(mixed[:, 25].exp().sum(), (1 - w) * acgt_mass + w, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(mixed[:, :25], mixed[:1, :25].expand(4, 25))  # earlier outputs unchanged
    assert torch.equal(weight[:, :26], weight[:1, :26].expand(4, 26))


def test_mixture_learns_to_trust_a_repeat_copy():
    copy = random_dna(300, 3)
    table = RepeatTable.fit([ids(random_dna(2000, 4) + copy)], k=12)
    labels = torch.from_numpy(ids(random_dna(200, 5) + copy))[None]
    counts = table.next_base_counts(labels)
    mixed, weight = mixture_log_likelihood(_uniform_log_probs(1, 500), labels, counts)
    inside = slice(200 + 12 + 50, 500)  # well into the copy
    assert counts[0, inside].sum(-1).gt(0).all()
    assert weight[0, inside].min() > 0.99
    assert -mixed[0, inside].mean() / np.log(2) < 0.1  # bits/base: the copy is predicted
    outside = slice(0, 200)
    torch.testing.assert_close(mixed[0, outside], torch.full((200,), np.log(0.25)), rtol=0, atol=1e-5)


def test_each_document_of_a_packed_row_is_mixed_as_if_alone():
    """Packed validation rows: the expert's k-mer context and its switching state start afresh at
    every document (as attention does), so two documents packed into one row score what they
    score in rows of their own; the row's padding scores nothing."""
    from biomoe.data.tokenizer import PAD_ID
    from biomoe.genomics.repeat_mix import score_rows

    copy = random_dna(120, 6)
    table = RepeatTable.fit([ids(random_dna(1500, 7) + copy)], k=10)
    first, second = ids(random_dna(80, 8) + copy[:60]), ids(copy[60:] + random_dna(30, 9))  # the copy runs across
    log_probs = torch.log_softmax(torch.randn(1, 256, 64), -1)
    labels = torch.full((1, 256), PAD_ID)
    labels[0, :140], labels[0, 140:230] = torch.from_numpy(first), torch.from_numpy(second)
    positions = torch.cat([torch.arange(140), torch.arange(90), torch.arange(26)])[None]
    packed = {"labels": labels, "loss_mask": TOK.unambiguous_mask(labels), "position_ids": positions}
    scores, mask = score_rows(table, log_probs, packed, 0.003, 0.005, follow_copies=True)
    assert mask.shape == (2, 140) and int(mask.sum()) == 230
    for row, (lo, hi) in enumerate([(0, 140), (140, 230)]):
        alone = {"labels": labels[:, lo:hi], "loss_mask": TOK.unambiguous_mask(labels[:, lo:hi])}
        expected, _ = score_rows(table, log_probs[:, lo:hi], alone, 0.003, 0.005, follow_copies=True)
        n = hi - lo
        torch.testing.assert_close(scores.exact[row, :n], expected.exact[0])
        torch.testing.assert_close(scores.copies[row, :n], expected.copies[0])
    assert not scores.opinion[1, :10].any()  # fewer than k bases of the second document: no context yet


def _diverged(seq: str, first: int, every: int, seed: int) -> tuple[str, list[int]]:
    """``seq`` with a substitution at base ``first`` and every ``every`` bases after it."""
    rng = np.random.default_rng(seed)
    out, where = list(seq), list(range(first, len(seq), every))
    for i in where:
        out[i] = rng.choice([b for b in "ACGT" if b != seq[i]])
    return "".join(out), where


def test_copy_expert_follows_a_diverged_copy_causally():
    """A copy with a substitution every 10 bases has no exact 12-mer after its first substitution;
    the copy expert keeps predicting the training base there, only from bases before each position."""
    k, source = 12, random_dna(400, 31)
    table = RepeatTable.fit([ids(random_dna(1500, 32) + source + random_dna(500, 33))], k=k)
    copy, _ = _diverged(source[:300], 30, 10, 34)
    labels = torch.from_numpy(ids(random_dna(100, 35) + copy))[None]
    exact = table.next_base_counts(labels)
    copies = table.copy_counts(labels, exact, smoothing=0.005)
    has_exact, speaks = exact[0].sum(-1) > 0, copies[0].sum(-1) > 0
    assert not (has_exact & speaks).any()  # the copy expert only fills where exact matches are silent
    assert has_exact[100 + k:100 + 30].all()  # the copy starts with 30 exact bases
    inside = torch.arange(100 + 31, 400)  # after the first substitution (exact counts still speak at it)
    assert not has_exact[inside].any() and speaks[inside].all()
    predicted = copies[0, inside].argmax(-1).numpy()
    truth = ids(source[:300])[inside.numpy() - 100] - A_ID
    assert (predicted == truth).all()  # the training base, also at the substituted positions
    # Causal: changing base t changes nothing the expert says at t or before.
    changed = labels.clone()
    changed[0, 250] = A_ID + (int(changed[0, 250]) - A_ID + 1) % 4
    again = table.copy_counts(changed, table.next_base_counts(changed), smoothing=0.005)
    torch.testing.assert_close(again[0, :251], copies[0, :251])
    # Scored: the diverged copy costs far less with copies followed than with exact matches only.
    base = _uniform_log_probs(1, 400)
    exact_only, _ = mixture_log_likelihood(base, labels, exact)
    followed, _ = mixture_log_likelihood(base, labels, exact + copies)
    bits = lambda ll: float(-ll[0, inside].mean() / np.log(2))  # noqa: E731
    assert bits(exact_only) == pytest.approx(2.0, abs=1e-3) and bits(followed) < 1.0


def test_copy_expert_stops_where_the_training_strand_ends():
    source = random_dna(200, 41)
    table = RepeatTable.fit([ids(source)], k=12, reverse_complement=False)
    labels = torch.from_numpy(ids(source[150:] + random_dna(100, 42)))[None]  # the copy runs off the end
    copies = table.copy_counts(labels, table.next_base_counts(labels), smoothing=0.005)
    assert copies[0, 50:].sum() == 0  # nothing is copied from beyond the strand's last base


def test_repeat_mix_cli_with_markov_and_checkpoint(tiny_config, write_fasta, tmp_path, capsys):
    unit = random_dna(400, 6)
    genome = random_dna(3000, 7) + unit + random_dna(2000, 8) + unit + random_dna(1500, 9)
    fasta = write_fasta({"chr": genome + unit + random_dna(700, 10)})
    out = tmp_path / "markov.json"
    png = tmp_path / "gain.png"
    assert main(["repeat-mix", str(fasta), "--seq-length", "256", "--val-fraction", "0.15",
                 "--markov-order", "3", "--json", str(out), "--plot", str(png)]) == 0
    assert png.stat().st_size > 10_000
    r = json.loads(out.read_text())
    assert r["repeat_positions"] > 200 and r["mixed_bits_per_base"] < r["base_bits_per_base"] - 0.05
    assert r["mixed_on_repeats_bits_per_base"] < 0.5 < r["base_on_repeats_bits_per_base"]
    assert "with the repeat expert" in capsys.readouterr().out

    torch.manual_seed(0)
    cfg = tiny_config()
    ckpt = save_checkpoint(tmp_path / "tiny.ckpt", MoETransformer(cfg), cfg)
    out = tmp_path / "ckpt.json"
    assert main(["repeat-mix", str(fasta), "--seq-length", "256", "--val-fraction", "0.15",
                 "--ckpt", str(ckpt), "--json", str(out)]) == 0
    r2 = json.loads(out.read_text())
    assert r2["positions"] == r["positions"] and r2["repeat_positions"] == r["repeat_positions"]
    assert r2["mixed_bits_per_base"] < r2["base_bits_per_base"]


def test_validation_callback_logs_what_repeat_mix_scores(tiny_config, write_fasta, tmp_path):
    """The callback's number is the CLI scorer's on the same weights, windows and positions, and
    it lands in the logged metrics next to the network's own bits/base."""
    import lightning as L

    from biomoe.model.config import OptimConfig
    from biomoe.data.datamodule import GenomeDataModule
    from biomoe.training.reports.repeat_mixture import RepeatMixture
    from biomoe.training.step.lightning_module import BioMoEModule
    from biomoe.genomics.repeat_mix import score

    unit = random_dna(300, 11)
    fasta = write_fasta({"chr": random_dna(2500, 12) + unit + random_dna(1200, 13) + unit + random_dna(300, 14)})
    dm = GenomeDataModule(fasta=str(fasta), seq_length=128, batch_size=4, val_fraction=0.15, rc_prob=0.0,
                          cache_dir=str(tmp_path / "cache"))
    torch.manual_seed(0)
    cfg = tiny_config()
    module = BioMoEModule(cfg, OptimConfig(), log_expert_load_every_n_steps=0)
    callback = RepeatMixture(k=10, follow_copies=True)
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[callback])
    (metrics,) = trainer.validate(module, datamodule=dm)
    assert 0 < metrics["val/repeat_fraction"] < 1
    assert metrics["val/repeat_mix_bits_per_base"] < metrics["val/bits_per_base"]

    def log_probs(batch):
        with torch.no_grad():
            logits = module.model(batch["input_ids"], position_ids=batch.get("position_ids")).logits
            return torch.log_softmax(logits.float(), -1)

    expected = score(dm, log_probs, callback.table, callback.switch, callback.smoothing, batch_size=4,
                     per_window=True)
    windows = expected["windows"]  # one per document of the packed validation rows
    documents = sum(len(dm.val_dataset.documents(i)) for i in range(len(dm.val_dataset)))
    assert len(windows) == documents and sum(w["bases"] for w in windows) == expected["positions"]
    weighted = sum(w["mixed"] * w["bases"] for w in windows) / expected["positions"]
    assert weighted == pytest.approx(expected["mixed_bits_per_base"], rel=1e-5)  # windows add up
    assert metrics["val/repeat_mix_bits_per_base"] == pytest.approx(expected["mixed_bits_per_base"], rel=1e-5)
    assert metrics["val/bits_per_base"] == pytest.approx(expected["base_bits_per_base"], rel=1e-5)
    followed = score(dm, log_probs, callback.table, callback.switch, callback.smoothing, batch_size=4,
                     follow_copies=True)
    assert metrics["val/repeat_copy_mix_bits_per_base"] == pytest.approx(followed["mixed_bits_per_base"], rel=1e-5)
    assert followed["repeat_positions"] == expected["repeat_positions"]  # the fraction counts exact matches


def test_callback_refuses_an_oversized_genome_before_training(tiny_config, write_fasta, tmp_path, monkeypatch):
    """The table is fitted in ``setup``: a training split over the expert's limit stops ``fit``
    before its first step, not at its first validation hours later."""
    import lightning as L

    import biomoe.genomics.repeat_expert
    from biomoe.model.config import OptimConfig
    from biomoe.data.datamodule import GenomeDataModule
    from biomoe.training.reports.repeat_mixture import RepeatMixture
    from biomoe.training.step.lightning_module import BioMoEModule

    monkeypatch.setattr(biomoe.genomics.repeat_expert, "MAX_TRAINING_BASES", 1000)
    fasta = write_fasta({"chr": random_dna(3000, 21)})
    dm = GenomeDataModule(fasta=str(fasta), seq_length=128, batch_size=4, cache_dir=str(tmp_path / "cache"))
    cfg = tiny_config()
    module = BioMoEModule(cfg, OptimConfig(), log_expert_load_every_n_steps=0)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=50, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, callbacks=[RepeatMixture()])
    with pytest.raises(ConfigError, match="would not fit in memory"):
        trainer.fit(module, datamodule=dm)
    assert trainer.global_step == 0


@pytest.mark.parametrize("args, expected", [
    (["--k", "40"], "repeat expert: k must be in 1..31, got 40"),
    (["--switch", "2"], "repeat expert: switch must be in [0, 1], got 2.0"),
    (["--smoothing", "0"], "repeat expert: smoothing must be > 0, got 0.0"),
    (["--ckpt", "missing.ckpt"], "missing.ckpt: checkpoint not found"),
    (["--json", "FILE/out.json"], "FILE/out.json: cannot write output (File exists: FILE)"),
])
def test_repeat_mix_bad_settings_are_one_line(args, expected, capsys, tmp_path, monkeypatch):
    lam = str(ROOT / "data/lambda_virus.fa.gz")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "FILE").write_text("a file where a folder is expected")
    assert main(["repeat-mix", lam, *args]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err[-1] == f"biomoe: error: {expected}" and "Traceback" not in "\n".join(err)


@pytest.mark.parametrize("option", ["--batch-size", "--seq-length"])
def test_repeat_mix_rejects_non_positive_sizes(option, capsys):
    lam = str(ROOT / "data/lambda_virus.fa.gz")
    code = main(["repeat-mix", lam, option, "0"])
    err = capsys.readouterr().err
    assert code == 2 and "expected a positive integer" in err and len(err.strip().splitlines()) == 1, err


def test_callback_refuses_bad_settings():
    from biomoe.model.config import ConfigError
    from biomoe.training.reports.repeat_mixture import RepeatMixture

    with pytest.raises(ConfigError, match="switch"):
        RepeatMixture(switch=-0.1)


def test_repeat_mix_cli_follow_copies_scores_a_diverged_repeat_better(write_fasta, tmp_path):
    unit = random_dna(600, 51)
    copy, _ = _diverged(unit, 40, 12, 52)  # 93 % identical: no exact 18-mer after base 40
    # Held out: the last 25 % = bases 5,250-7,000, two windows of 512; the copy starts at 5,400, in the
    # first window (each window starts a fresh context, so the copy is picked up there).
    fasta = write_fasta({"chr": random_dna(3000, 53) + unit + random_dna(1800, 54) + copy + random_dna(1000, 55)})
    results = {}
    for flag in ([], ["--follow-copies"]):
        out = tmp_path / f"r{len(flag)}.json"
        assert main(["repeat-mix", str(fasta), "--seq-length", "512", "--val-fraction", "0.25",
                     "--markov-order", "2", "--k", "14", "--json", str(out), *flag]) == 0
        results[bool(flag)] = json.loads(out.read_text())
    exact, followed = results[False], results[True]
    assert followed["follow_copies"] and not exact["follow_copies"]
    assert followed["positions"] == exact["positions"] and followed["repeat_positions"] == exact["repeat_positions"]
    assert followed["mixed_bits_per_base"] < exact["mixed_bits_per_base"] - 0.1
    assert followed["exact_mixed_bits_per_base"] == pytest.approx(exact["mixed_bits_per_base"], rel=1e-9)
