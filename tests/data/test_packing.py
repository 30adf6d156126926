"""Packed rows: whole short records and pieces of long contigs, each a document of its row."""

from __future__ import annotations

import warnings
from collections import Counter

import numpy as np
import pytest
import torch

from biomoe.data.datamodule import GenomeDataModule
from biomoe.data.packed import PackedGenomeDataset
from biomoe.data.packing import cut_pieces, pack_rows
from biomoe.data.sources.genome import Genome
from biomoe.data.tokenizer import BOS_ID, PAD_ID, NucleotideTokenizer
from biomoe.errors import GenomeInputError
from conftest import random_dna

TOK = NucleotideTokenizer()
SEQ = 64


@pytest.fixture
def mixed(write_fasta, cache_dir) -> Genome:
    """Two files: long contigs with ends that do not fill a row, short records, an N gap, soft-masked
    bases, IUPAC codes, and a record of N only."""
    first = write_fasta({"chrom": random_dna(1000, 1), "plasmid": random_dna(150, 2), "tiny": random_dna(7, 3),
                         "gappy": random_dna(64, 4) + "N" * 64 + random_dna(90, 5).lower()}, name="a.fa")
    second = write_fasta({"phage": random_dna(300, 6), "allN": "N" * 30, "iupac": "ACGTRYACGT" * 4,
                          "frag": random_dna(23, 7)}, name="b.fa")
    return Genome([first, second], cache_dir=cache_dir)


def _packed(genome, **kw) -> PackedGenomeDataset:
    """Packed rows that keep the 40 % IUPAC record (only pieces without A/C/G/T are dropped)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PackedGenomeDataset(genome, SEQ, max_n_fraction=0.5, **kw)


def _documents(item: dict[str, torch.Tensor]) -> list[tuple[int, int]]:
    """(start, end) of each document of a row, read from its position_ids alone."""
    starts = torch.nonzero(item["position_ids"] == 0).flatten().tolist()
    return list(zip(starts, starts[1:] + [len(item["position_ids"])]))


def test_every_base_is_a_label_exactly_once_per_epoch(mixed) -> None:
    ds = _packed(mixed, tag_genome=True)
    seen: Counter = Counter()
    for index in range(len(ds)):
        item = ds[index]
        docs = ds.documents(index)
        spans = _documents(item)
        real = spans if len(spans) == len(docs) else spans[:-1]  # the last span is padding when the row is short
        assert len(real) == len(docs)
        for (contig, start, end), (lo, hi) in zip(docs, real):
            assert hi - lo == end - start
            expected = mixed.fetch(contig, start, end).upper()
            assert TOK.decode(item["labels"][lo:hi]) == expected
            assert item["loss_mask"][lo:hi].tolist() == [c in "ACGT" for c in expected]
            seen.update((contig, p) for p, scored in zip(range(start, end), item["loss_mask"][lo:hi].tolist())
                        if scored)
        pad = slice(real[-1][1] if real else 0, SEQ)
        assert (item["labels"][pad] == PAD_ID).all() and not item["loss_mask"][pad].any()
        assert (item["genome"][pad] == -1).all()
    # 'gappy' [64, 128) and 'allN' are dropped (no A/C/G/T); every A/C/G/T of the corpus is scored once
    acgt = {(c.name, p) for c in mixed.contigs for p, b in enumerate(mixed.fetch(c.name, 0, c.length).upper())
            if b in "ACGT"}
    assert set(seen) == acgt and set(seen.values()) == {1}
    assert ("gappy", 64, 128) not in [d for i in range(len(ds)) for d in ds.documents(i)]


def test_short_records_are_whole_documents_and_long_ends_are_kept(mixed) -> None:
    ds = _packed(mixed)
    docs = [d for i in range(len(ds)) for d in ds.documents(i)]
    for name, length in [("plasmid", 150), ("phage", 300), ("tiny", 7), ("frag", 23), ("iupac", 40)]:
        mine = sorted((s, e) for c, s, e in docs if c == name)
        if length <= SEQ:
            assert mine == [(0, length)]  # one whole document
        else:
            assert mine[-1][1] == length and all(e - s <= SEQ for s, e in mine)  # the end is kept
    assert sorted((s, e) for c, s, e in docs if c == "chrom")[-1] == (960, 1000)


def test_position_ids_restart_and_each_document_is_laid_out_like_a_window(mixed) -> None:
    ds = _packed(mixed, mutation_prob=0.0)
    several = 0
    for index in range(len(ds)):
        item = ds[index]
        assert item["position_ids"].dtype == torch.long and item["position_ids"].shape == (SEQ,)
        spans = _documents(item)
        several += len(spans) > 1
        for lo, hi in spans:
            assert item["position_ids"][lo:hi].tolist() == list(range(hi - lo))
            if item["labels"][lo] != PAD_ID:
                assert item["input_ids"][lo] == BOS_ID
                assert torch.equal(item["input_ids"][lo + 1:hi], item["labels"][lo:hi - 1])
    assert several > 3


def test_genome_is_per_token_and_minus_one_on_padding(mixed) -> None:
    ds = _packed(mixed, tag_genome=True)
    files = {c.name: c.file_index for c in mixed.contigs}
    mixed_rows = 0
    for index in range(len(ds)):
        item = ds[index]
        assert item["genome"].shape == (SEQ,) and item["genome"].dtype == torch.long
        spans = _documents(item)
        for (contig, _, _), (lo, hi) in zip(ds.documents(index), spans):
            assert (item["genome"][lo:hi] == files[contig]).all()
        mixed_rows += len({files[c] for c, _, _ in ds.documents(index)}) > 1
        assert ((item["genome"] == -1) == (item["labels"] == PAD_ID)).all()
    assert mixed_rows  # rows hold documents of both files


def test_reverse_complement_flips_each_document_and_keeps_the_layout(mixed) -> None:
    forward = _packed(mixed)
    flipped = _packed(mixed, rc_prob=0.5, seed=3)
    some_mixed = False
    for index in range(len(flipped)):
        flips = flipped.reverse_complemented(index)
        a, b = forward[index], flipped[index]
        assert torch.equal(a["position_ids"], b["position_ids"])
        some_mixed |= bool(flips.any() and not flips.all())
        for flip, (lo, hi) in zip(flips.tolist(), _documents(a)):
            expected = TOK.reverse_complement(a["labels"][lo:hi]) if flip else a["labels"][lo:hi]
            assert torch.equal(b["labels"][lo:hi], expected)
            assert b["input_ids"][lo] == BOS_ID and torch.equal(b["input_ids"][lo + 1:hi], expected[:-1])
    assert some_mixed  # flips are decided per document, not per row
    again = _packed(mixed, rc_prob=0.5, seed=3)
    assert all(np.array_equal(again.reverse_complemented(i), flipped.reverse_complemented(i))
               for i in range(len(again)))
    epoch0 = [flipped.reverse_complemented(i).tolist() for i in range(len(flipped))]
    flipped.set_epoch(1)
    assert [flipped.reverse_complemented(i).tolist() for i in range(len(flipped))] != epoch0


def test_mutation_touches_input_bases_only(mixed) -> None:
    clean, noisy = _packed(mixed), _packed(mixed, mutation_prob=0.2, seed=1)
    changed = 0
    for index in range(len(clean)):
        a, b = clean[index], noisy[index]
        assert torch.equal(a["labels"], b["labels"]) and torch.equal(a["position_ids"], b["position_ids"])
        diff = a["input_ids"] != b["input_ids"]
        assert TOK.unambiguous_mask(a["input_ids"][diff]).all()  # BOS, padding and N are never mutated
        changed += int(diff.sum())
    assert changed > 0


def test_all_n_records_are_dropped_in_one_line(write_fasta, cache_dir) -> None:
    records = {"good": random_dna(200, 1), **{f"gap{i}": "N" * (10 + i) for i in range(25)}, "iupac": "RYKM" * 10}
    genome = Genome(write_fasta(records), cache_dir=cache_dir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = PackedGenomeDataset(genome, SEQ)
    assert [str(w.message) for w in caught] == [
        f"train: dropped 26 record piece(s) with no A/C/G/T or more than 10% N/ambiguous bases "
        f"({sum(range(10, 35)) + 40:,} bp)"]
    assert {c for i in range(len(ds)) for c, _, _ in ds.documents(i)} == {"good"}
    only_n = Genome(write_fasta({"n": "N" * 500}, name="n.fa"), cache_dir=cache_dir)
    with pytest.raises(GenomeInputError, match="no train rows: all 8 pieces have no A/C/G/T"):
        PackedGenomeDataset(only_n, SEQ)


def test_packing_is_deterministic_and_rows_fit() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 101, 500)
    table = pack_rows(lengths, 100)
    assert sorted(table.pieces.tolist()) == list(range(500))  # every item once
    assert all(lengths[table.row(r)].sum() <= 100 for r in range(len(table)))
    again = pack_rows(lengths, 100)
    assert np.array_equal(table.pieces, again.pieces) and np.array_equal(table.offsets, again.offsets)
    groups = rng.integers(0, 3, 500)
    by_group = pack_rows(lengths, 100, groups)
    assert all(len(set(groups[by_group.row(r)].tolist())) == 1 for r in range(len(by_group)))
    with pytest.raises(ValueError):
        pack_rows(np.array([0, 5]), 100)


def test_real_bases_fill_rows_of_a_mixed_corpus() -> None:
    """At seq_length 8192: chromosomes, plasmids, phages and draft/metagenomic contigs (a log-normal
    around 3 kb), 90 % training cut. Padding is only where nothing fits: >= 98 % real bases."""
    rng = np.random.default_rng(1)
    lengths = np.concatenate([rng.integers(2_000_000, 6_000_000, 5),
                              np.exp(rng.uniform(np.log(2e3), np.log(3e5), 40)).astype(int),
                              rng.integers(20_000, 150_000, 60),
                              np.clip(rng.lognormal(np.log(3000), 1.0, 2000), 300, 500_000).astype(int)])
    regions = [(i, 0, int(n * 0.9)) for i, n in enumerate(lengths)]
    _, starts, ends = cut_pieces(regions, 8192, 8192)
    table = pack_rows(ends - starts, 8192)
    real = (ends - starts).sum() / (len(table) * 8192)
    assert real >= 0.98
    short = np.flatnonzero(ends - starts < 8192)
    assert len(table) < len(starts) - len(short) // 2  # short pieces share rows


def test_stride_cuts_the_pieces_that_run_past_the_end() -> None:
    contigs, starts, ends = cut_pieces([(0, 0, 250), (1, 10, 40)], 100, 50)
    assert list(zip(contigs.tolist(), starts.tolist(), ends.tolist())) == [
        (0, 0, 100), (0, 50, 150), (0, 100, 200), (0, 150, 250), (0, 200, 250), (1, 10, 40)]


def _datamodule(fasta, cache_dir, **kw) -> GenomeDataModule:
    settings = dict(fasta=fasta, seq_length=SEQ, batch_size=4, val_fraction=0.2, rc_prob=0.5, seed=7,
                    cache_dir=str(cache_dir), mutation_prob=0.05)
    dm = GenomeDataModule(**{**settings, **kw})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dm.setup("fit")
    return dm


def test_resumed_loader_reads_the_rows_of_the_uninterrupted_run(mixed, cache_dir) -> None:
    fasta = [str(p) for p in mixed.paths]
    whole = _datamodule(fasta, cache_dir).train_dataloader()
    epoch0 = list(whole)
    epoch1 = list(whole)
    assert len(epoch0) > 3
    resumed = _datamodule(fasta, cache_dir).train_dataloader()  # a fresh process: tables rebuilt
    resumed.load_state_dict({"epoch": 0, "batches": 2})
    for seen, expected in zip(list(resumed), epoch0[2:], strict=True):
        assert seen.keys() == expected.keys() and all(torch.equal(seen[k], expected[k]) for k in seen)
    assert torch.equal(next(iter(resumed))["input_ids"], epoch1[0]["input_ids"])  # the next epoch as well


def test_datamodule_packs_train_and_held_out_rows(mixed, cache_dir) -> None:
    dm = _datamodule([str(p) for p in mixed.paths], cache_dir)
    assert isinstance(dm.train_dataset, PackedGenomeDataset) and isinstance(dm.val_dataset, PackedGenomeDataset)
    train = {(c, p) for i in range(len(dm.train_dataset)) for c, s, e in dm.train_dataset.documents(i)
             for p in range(s, e)}
    val = {(c, p) for i in range(len(dm.val_dataset)) for c, s, e in dm.val_dataset.documents(i) for p in range(s, e)}
    assert not train & val
    assert {p for c, p in val if c == "tiny"} == {5, 6}  # the last fifth of a 7 bp record is validated
    batch = next(iter(dm.val_dataloader()))
    assert batch["genome"].shape == batch["labels"].shape and "position_ids" in batch
    assert "genome" not in next(iter(dm.train_dataloader()))


def test_per_file_sampling_draws_rows_of_one_file(mixed, cache_dir) -> None:
    dm = _datamodule([str(p) for p in mixed.paths], cache_dir, file_weights={"b": 3.0})
    ds = dm.train_dataset
    files = {c.name: c.file_index for c in mixed.contigs}
    for index in range(len(ds)):
        assert {files[c] for c, _, _ in ds.documents(index)} == {int(ds.file_index[index])}
    sub = _datamodule([str(p) for p in mixed.paths], cache_dir, max_train_windows=5)
    assert len(sub.train_dataset) == 5


@pytest.mark.parametrize("seq_length, stride", [(8, 2), (10, 3), (10, 4), (7, 7)])
def test_a_smaller_stride_covers_the_start_of_a_region_fewer_times(seq_length: int, stride: int) -> None:
    """What the docstring of ``cut_pieces`` says: through the first ``seq_length`` bases of a
    region, base ``b`` is in ``b // stride + 1`` pieces; from there to the region's end, in
    ``seq_length // stride`` or ``ceil(seq_length / stride)`` (one count where stride divides)."""
    length = 5 * seq_length + 3
    _, starts, ends = cut_pieces([(0, 0, length)], seq_length, stride)
    coverage = np.zeros(length, dtype=int)
    for start, end in zip(starts, ends):
        coverage[start:end] += 1
    assert coverage[:seq_length].tolist() == [b // stride + 1 for b in range(seq_length)]
    plateau = set(coverage[seq_length:].tolist())
    assert plateau == {seq_length // stride, -(-seq_length // stride)}
