"""DNA generation: KV-cached decoding matches full recomputation, only bases are emitted, seeds repeat."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import torch

from biomoe.data.tokenizer import A_ID, BOS_ID, N_ID, T_ID, NucleotideTokenizer
from biomoe.inference.generate import generate, parse_region
from biomoe.inference.sampling import SamplingSettings, sample_next
from biomoe.model.transformer import KVCache, MoETransformer
from biomoe.cli.main import main as cli_main
from helpers.special_tokens import favour_special_tokens
from conftest import random_dna, save_checkpoint

TOK = NucleotideTokenizer()


@pytest.fixture
def model(tiny_config) -> MoETransformer:
    torch.manual_seed(0)
    return MoETransformer(tiny_config(init_std=0.3)).eval()  # large init: outputs depend visibly on context


@pytest.fixture
def ckpt(tmp_path, model):
    return save_checkpoint(tmp_path / "tiny.ckpt", model, model.config, data={"seq_length": 64})


@torch.no_grad()
def test_cached_logits_equal_full_forward_for_prefill_chunks_and_single_tokens(model):
    ids = torch.randint(A_ID, T_ID + 1, (3, 41))
    ids[:, 0] = BOS_ID
    full = model(ids).logits
    cache = KVCache(model.config, batch_size=3, max_length=41)
    pieces = [model(ids[:, :9], cache=cache).logits, model(ids[:, 9:20], cache=cache).logits]  # chunked prefill
    pieces += [model(ids[:, t:t + 1], cache=cache).logits for t in range(20, 41)]  # one token at a time
    assert cache.length == 41
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-4, atol=1e-5)


def test_cache_refuses_more_tokens_than_it_holds(model):
    cache = KVCache(model.config, batch_size=1, max_length=4)
    with pytest.raises(ValueError, match="holds 4 tokens"):
        model(torch.full((1, 5), A_ID), cache=cache)


def _uncached_greedy(model, prompt: np.ndarray, length: int, context: int) -> np.ndarray:
    """Reference: recompute the whole window for every base, restarting like generate() does."""
    history = list(prompt)
    tokens = [BOS_ID] + history[-(context - 1):]
    keep = max(1, (context - 1) // 2)
    out = []
    for _ in range(length):
        with torch.no_grad():
            logits = model(torch.tensor([tokens])).logits[0, -1]
        allowed = logits[A_ID:T_ID + 1]
        token = A_ID + int(allowed.argmax())
        out.append(token)
        history.append(token)
        tokens = tokens + [token] if len(tokens) < context else [BOS_ID] + history[-keep:]
    return np.array(out)


@pytest.mark.parametrize("context", [200, 16])  # 16: the sample outgrows the context and restarts
def test_generation_with_cache_equals_recomputing_every_step(model, context):
    prompt = TOK.encode(random_dna(9, seed=4))
    (cached,) = generate(model, prompt, 40, settings=SamplingSettings(temperature=0), context=context)
    np.testing.assert_array_equal(cached, _uncached_greedy(model, prompt, 40, context))


def test_only_nucleotides_are_emitted_even_when_specials_are_likeliest(model):
    favour_special_tokens(model)
    samples = generate(model, None, 300, num_samples=4, settings=SamplingSettings(temperature=1.5), seed=1)
    emitted = set(np.concatenate(samples).tolist())
    assert emitted <= {A_ID, A_ID + 1, A_ID + 2, T_ID} and len(emitted) == 4
    with_n = generate(model, None, 300, num_samples=2, settings=SamplingSettings(allow_n=True), seed=1)
    assert N_ID in np.concatenate(with_n)


def test_same_seed_same_samples_whatever_the_batching(model):
    prompt = TOK.encode("ACGTTGCA")
    settings = SamplingSettings(temperature=1.0, top_p=0.95)
    a = generate(model, prompt, 50, num_samples=5, settings=settings, seed=7, batch_size=2)
    b = generate(model, prompt, 50, num_samples=3, settings=settings, seed=7, batch_size=3)
    c = generate(model, prompt, 50, num_samples=3, settings=settings, seed=8, batch_size=3)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert any((x != y).any() for x, y in zip(b, c))
    assert any((a[0] != other).any() for other in a[1:])  # samples of one run differ from each other


def test_top_k_and_top_p_keep_only_the_likeliest_bases():
    logits = torch.full((1, 64), -1e4)
    logits[0, A_ID:T_ID + 1] = torch.tensor([3.0, 2.0, 1.0, 0.0])  # probabilities ~ .64 .24 .09 .03
    uniforms = torch.linspace(0, 0.999, 200)
    batch = logits.expand(200, -1)
    top1 = sample_next(batch, SamplingSettings(top_k=1), uniforms)
    assert set(top1.tolist()) == {A_ID}
    top2 = sample_next(batch, SamplingSettings(top_k=2), uniforms)
    assert set(top2.tolist()) == {A_ID, A_ID + 1}
    nucleus = sample_next(batch, SamplingSettings(top_p=0.8), uniforms)  # .64 < .8 <= .64 + .24
    assert set(nucleus.tolist()) == {A_ID, A_ID + 1}
    everything = sample_next(batch, SamplingSettings(), uniforms)
    assert set(everything.tolist()) == {A_ID, A_ID + 1, A_ID + 2, T_ID}


def test_region_syntax():
    assert parse_region("chr1:1,001-2,000") == ("chr1", 1000, 2000)
    assert parse_region("HLA:A:5-9") == ("HLA:A", 4, 9)
    assert parse_region("plasmid") == ("plasmid", None, None)
    with pytest.raises(ValueError):
        parse_region("chr1:0-5")


def test_cli_writes_fasta_samples_from_a_fasta_region(ckpt, write_fasta, tmp_path, capsys):
    genome = random_dna(500, seed=2)
    fasta = write_fasta({"chr1": genome})
    out = tmp_path / "gen" / "samples.fa"
    argv = ["generate", str(ckpt), "--prompt-region", "chr1:101-130", "--fasta", str(fasta), "--out", str(out),
            "--length", "90", "--num-samples", "3", "--batch-size", "2", "--top-k", "3", "--seed", "5",
            "--include-prompt", "--line-width", "50"]
    assert cli_main(argv) == 0
    text = out.read_text()
    records = [r for r in text.split(">") if r]
    assert len(records) == 3
    for i, record in enumerate(records, start=1):
        header, *lines = record.strip().split("\n")
        assert header.startswith(f"sample_{i} prompt=chr1:101-130 length=90 seed=5")
        assert max(len(line) for line in lines) == 50
        seq = "".join(lines)
        assert len(seq) == 120 and seq[:30] == genome[100:130] and set(seq) <= set("ACGT")
    err = capsys.readouterr().err
    assert "generate" in err  # the progress bar
    timing = err.strip().splitlines()[-1]  # benchmarks parse this line
    assert re.fullmatch(r"generated 270 bases in \d+\.\d\d s: [\d,]+ bases/s, [\d,]+ steps/s after the first step "
                        r"\(first step 4 bases in \d+\.\d\d s, includes warm-up; [\d,]+ bases/s, [\d,]+ steps/s "
                        r"over the whole run\)", timing), timing
    assert cli_main(argv) == 0 and out.read_text() == text  # same seed, same file
    assert cli_main(argv + ["--no-graph"]) == 0 and out.read_text() == text  # the CPU decodes eagerly anyway
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() would create it, not mkstemp's 0600


def test_a_context_past_the_training_length_warns_as_score_fasta_and_embed_do(ckpt, tmp_path, capsys):
    out = tmp_path / "s.fa"
    assert cli_main(["generate", str(ckpt), "--prompt", "ACGT", "--length", "4", "--context", "99999",
                     "--out", str(out), "--device", "cpu", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "biomoe: warning: --context 99,999 is longer than the 64 bases the model was trained on" in err, err
    assert len(out.read_text().split("\n")[1]) == 4


def test_cli_errors_are_one_line(ckpt, write_fasta, tmp_path, capsys):
    fasta = write_fasta({"chr1": random_dna(100)})
    cases = [
        (["--prompt", "ACGTJ", "--out", str(tmp_path / "x.fa")], "--prompt"),
        (["--prompt-region", "chr1:1-10", "--out", str(tmp_path / "x.fa")], "needs the genome"),
        (["--prompt-region", "chr9:1-10", "--fasta", str(fasta), "--out", str(tmp_path / "x.fa")], "chr9"),
        (["--prompt-region", "chr1:90-120", "--fasta", str(fasta), "--out", str(tmp_path / "x.fa")], "beyond"),
        (["--prompt-region", "chr1:1-10", "--fasta", str(fasta), "--out", str(fasta)], "an input"),
    ]
    for extra, message in cases:
        assert cli_main(["generate", str(ckpt), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("biomoe: error:") and message in err and "\n" not in err
    assert fasta.read_text().startswith(">chr1")  # the input was not touched


@pytest.mark.parametrize("decode", ["dynamic", "static"])
def test_cpu_decoding_runs_on_one_thread_and_gives_the_threads_back(model, decode):
    """A decoding step's operations are one token per sample: on a CPU they run on one intra-op
    thread (split over several, a loaded 2-core machine spent milliseconds per small product)."""
    seen: list[int] = []
    handle = model.register_forward_hook(lambda module, inputs, output: seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        generate(model, TOK.encode("ACGT"), 6, num_samples=2, decode=decode)
        assert seen and set(seen) == {1}
        assert torch.get_num_threads() == 2
    finally:
        handle.remove()
        torch.set_num_threads(before)
