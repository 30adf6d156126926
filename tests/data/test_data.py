"""Window datasets and the DataModule: positions, masks, splits, RC, workers, DDP."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from biomoe.data.datamodule import GenomeDataModule
from biomoe.data.dataset import GenomeWindowDataset
from biomoe.data.packed import PackedGenomeDataset
from biomoe.data.splits import split_regions
from biomoe.errors import GenomeInputError
from biomoe.data.sources.genome import Genome
from biomoe.data.tokenizer import BOS_ID, NucleotideTokenizer
from conftest import ROOT, random_dna

TOK = NucleotideTokenizer()


@pytest.fixture
def genome(write_fasta, cache_dir) -> Genome:
    records = {"c1": random_dna(1000, 1), "c2": random_dna(530, 2), "tiny": random_dna(40, 3)}
    return Genome(write_fasta(records), cache_dir=cache_dir)


def _positions(ds: GenomeWindowDataset) -> list[tuple[str, int, int]]:
    return [ds.window(i) for i in range(len(ds))]


def test_window_count_and_positions(genome) -> None:
    with pytest.warns(UserWarning, match=r"skipping 1 contig\(s\) shorter than seq_length 100 \(40 bp\)"):
        ds = GenomeWindowDataset(genome, seq_length=100, stride=50)
    # c1: starts 0..900 step 50 -> 19; c2: 0..400 step 50 -> 9 (430 would overrun 530)
    assert len(ds) == 19 + 9
    assert _positions(ds)[:3] == [("c1", 0, 100), ("c1", 50, 150), ("c1", 100, 200)]
    assert _positions(ds)[-1] == ("c2", 400, 500)
    with pytest.warns(UserWarning):
        assert len(GenomeWindowDataset(genome, seq_length=100)) == 10 + 5  # stride defaults to seq_length


def test_item_shift_and_content(genome) -> None:
    with pytest.warns(UserWarning):
        ds = GenomeWindowDataset(genome, seq_length=64, stride=64)
    item = ds[3]
    assert set(item) == {"input_ids", "labels", "loss_mask"}
    assert item["labels"].dtype == torch.long and item["input_ids"].dtype == torch.long
    assert item["loss_mask"].dtype == torch.bool and item["labels"].shape == (64,)
    contig, start, end = ds.window(3)
    assert TOK.decode(item["labels"]) == genome.fetch(contig, start, end).upper()
    assert item["input_ids"][0] == BOS_ID
    assert torch.equal(item["input_ids"][1:], item["labels"][:-1])


def test_n_heavy_windows_skipped_and_mask(write_fasta, cache_dir) -> None:
    seq = "ACGT" * 25 + "N" * 100 + "ACGTRYACGT" * 10 + "acgtNNNNNN" * 10
    g = Genome(write_fasta({"x": seq}), cache_dir=cache_dir)
    ds = GenomeWindowDataset(g, seq_length=100, max_n_fraction=0.1)
    # windows: [0,100) clean, [100,200) all N -> dropped, [200,300) 20% IUPAC -> dropped, [300,400) 60% N
    assert _positions(ds) == [("x", 0, 100)]
    ds_all = GenomeWindowDataset(g, seq_length=100, max_n_fraction=1.0)
    assert len(ds_all) == 4
    iupac = ds_all[2]
    assert iupac["loss_mask"].tolist() == [c in "ACGT" for c in seq[200:300]]
    assert iupac["loss_mask"].sum() == 80
    soft = ds_all[3]
    assert soft["loss_mask"].tolist() == [c in "acgt" for c in seq[300:400]]


def test_all_n_genome_is_clear_error(write_fasta, cache_dir) -> None:
    g = Genome(write_fasta({"n": "N" * 500}), cache_dir=cache_dir)
    with pytest.raises(GenomeInputError, match=r"no train windows: all 5 windows have more than 10% N") as info:
        GenomeWindowDataset(g, seq_length=100)
    assert "g.fa" in str(info.value)


def test_all_contigs_too_short_is_error(write_fasta, cache_dir) -> None:
    g = Genome(write_fasta({"a": "ACGT" * 5, "b": "ACG"}), cache_dir=cache_dir)
    with pytest.warns(UserWarning), pytest.raises(GenomeInputError, match="shorter than seq_length"):
        GenomeWindowDataset(g, seq_length=100)


def test_short_contigs_are_reported_in_one_line(write_fasta, cache_dir) -> None:
    records = {"long": random_dna(300, 5), **{f"short{i}": random_dna(20 + i, 6 + i) for i in range(30)}}
    g = Genome(write_fasta(records), cache_dir=cache_dir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = GenomeWindowDataset(g, seq_length=100)
    lines = [str(w.message) for w in caught]
    assert lines == [f"train: skipping 30 contig(s) shorter than seq_length 100 ({sum(range(20, 50)):,} bp); "
                     "data.packing: true trains on them"]
    assert {ds.window(i)[0] for i in range(len(ds))} == {"long"}


def _spans(ds) -> list[tuple[str, int, int]]:
    """Every window, or every document of every packed row."""
    if isinstance(ds, PackedGenomeDataset):
        return [span for i in range(len(ds)) for span in ds.documents(i)]
    return _positions(ds)


def _covered(ds) -> set[tuple[str, int]]:
    return {(c, p) for c, s, e in _spans(ds) for p in range(s, e)}


def test_fraction_split_disjoint(genome) -> None:
    train_r, val_r = split_regions(genome, None, 0.2)
    with pytest.warns(UserWarning):
        train = GenomeWindowDataset(genome, 100, stride=7, regions=train_r)
        val = GenomeWindowDataset(genome, 100, regions=val_r, split="validation")
    assert len(train) and len(val)
    assert not _covered(train) & _covered(val)
    assert max(s for c, s, e in _positions(train) if c == "c1") + 100 <= 800
    assert min(s for c, s, e in _positions(val) if c == "c1") >= 800


def test_contig_split_disjoint_and_unknown(genome) -> None:
    train_r, val_r = split_regions(genome, ["c2"], 0.5)
    with pytest.warns(UserWarning):
        train = GenomeWindowDataset(genome, 100, regions=train_r)
    val = GenomeWindowDataset(genome, 100, regions=val_r)
    assert {c for c, _, _ in _positions(train)} == {"c1"}
    assert {c for c, _, _ in _positions(val)} == {"c2"}
    with pytest.raises(GenomeInputError, match="unknown contig 'chrZ'"):
        split_regions(genome, ["chrZ"], 0.1)
    with pytest.raises(GenomeInputError, match="nothing is left"):
        split_regions(genome, ["c1", "c2", "tiny"], 0.1)


def test_mutation_corrupts_inputs_only_at_the_set_rate(write_fasta, cache_dir) -> None:
    seq = random_dna(4000, 9)[:1500] + "N" * 100 + random_dna(4000, 10)[:1500]
    genome = Genome(write_fasta({"c": seq}), cache_dir=cache_dir)
    clean = GenomeWindowDataset(genome, 500, max_n_fraction=0.5)
    noisy = GenomeWindowDataset(genome, 500, max_n_fraction=0.5, mutation_prob=0.1, seed=4)
    changed = total = 0
    for i in range(len(clean)):
        a, b = clean[i], noisy[i]
        assert torch.equal(a["labels"], b["labels"]) and torch.equal(a["loss_mask"], b["loss_mask"])
        assert b["input_ids"][0] == BOS_ID
        diff = a["input_ids"] != b["input_ids"]
        acgt = torch.from_numpy(np.asarray(TOK.unambiguous_mask(a["input_ids"].numpy())))
        assert not diff[~acgt].any(), "N and specials must never be mutated"
        assert TOK.unambiguous_mask(b["input_ids"][diff].numpy()).all(), "a mutation is always a base"
        changed += int(diff.sum())
        total += int(acgt.sum())
    assert 0.08 < changed / total < 0.12
    again = GenomeWindowDataset(genome, 500, max_n_fraction=0.5, mutation_prob=0.1, seed=4)
    assert torch.equal(noisy[1]["input_ids"], again[1]["input_ids"])  # same (seed, epoch, index)
    first = noisy[1]["input_ids"].clone()
    noisy.set_epoch(1)
    assert not torch.equal(first, noisy[1]["input_ids"])  # fresh noise each epoch
    with pytest.raises(ValueError, match="mutation_prob"):
        GenomeWindowDataset(genome, 500, mutation_prob=1.0)


def test_validation_is_never_mutated(write_fasta, cache_dir) -> None:
    dm = GenomeDataModule(fasta=write_fasta({"c": random_dna(3000, 11)}), seq_length=100, batch_size=4,
                          val_fraction=0.2, cache_dir=str(cache_dir), mutation_prob=0.2)
    dm.setup("fit")
    assert dm.train_dataset.mutation_prob == 0.2 and dm.val_dataset.mutation_prob == 0.0
    item = dm.val_dataset[0]
    assert torch.equal(item["input_ids"][1:], item["labels"][:-1])


def _flips(ds: GenomeWindowDataset) -> list[bool]:
    return [ds.is_reverse_complemented(i) for i in range(len(ds))]


def test_reverse_complement_determinism(genome) -> None:
    a = GenomeWindowDataset(genome, 20, rc_prob=0.5, seed=1)
    b = GenomeWindowDataset(genome, 20, rc_prob=0.5, seed=1)
    c = GenomeWindowDataset(genome, 20, rc_prob=0.5, seed=2)
    assert _flips(a) == _flips(b)
    assert _flips(a) != _flips(c)
    assert 0.3 < np.mean(_flips(a)) < 0.7
    epoch0 = _flips(a)
    a.set_epoch(1)
    assert _flips(a) != epoch0
    a.set_epoch(0)
    assert _flips(a) == epoch0
    forward = GenomeWindowDataset(genome, 20, rc_prob=0.0)
    flipped = [i for i, f in enumerate(epoch0) if f]
    kept = [i for i, f in enumerate(epoch0) if not f]
    for i in flipped[:5]:
        expected = TOK.reverse_complement(forward[i]["labels"])
        assert torch.equal(a[i]["labels"], expected)
        assert a[i]["input_ids"][0] == BOS_ID and torch.equal(a[i]["input_ids"][1:], expected[:-1])
    for i in kept[:5]:
        assert torch.equal(a[i]["labels"], forward[i]["labels"])


def _batches(ds, num_workers: int, **kw) -> list[dict[str, torch.Tensor]]:
    loader = DataLoader(ds, batch_size=4, shuffle=False, num_workers=num_workers, **kw)
    return list(loader)


def test_workers_match_single_process(genome) -> None:
    with pytest.warns(UserWarning):
        ds = GenomeWindowDataset(genome, 50, stride=25, rc_prob=0.5, seed=3)
    ds.genome.fetch(0, 0, 10)  # open a handle in the parent: workers must not reuse it
    pickle.loads(pickle.dumps(ds))  # picklable (needed for spawn)
    single = _batches(ds, 0)
    multi = _batches(ds, 2)
    assert len(single) == len(multi)
    for x, y in zip(single, multi):
        for key in x:
            assert torch.equal(x[key], y[key])


def test_distributed_sampler_disjoint(genome) -> None:
    ds = GenomeWindowDataset(genome, 30, stride=30)
    shards = []
    for rank in range(2):
        sampler = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=0, drop_last=True)
        sampler.set_epoch(0)
        shards.append(set(sampler))
        loader = DataLoader(ds, batch_size=8, sampler=sampler)
        assert sum(len(b["labels"]) for b in loader) == len(ds) // 2
    assert not shards[0] & shards[1]
    assert len(shards[0] | shards[1]) == len(ds) // 2 * 2


def test_max_windows_subsample(genome) -> None:
    full = GenomeWindowDataset(genome, 10)
    sub = GenomeWindowDataset(genome, 10, max_windows=7, seed=4)
    sub2 = GenomeWindowDataset(genome, 10, max_windows=7, seed=4)
    assert len(sub) == 7 and set(_positions(sub)) <= set(_positions(full))
    assert _positions(sub) == _positions(sub2)


# ---------------------------------------------------------------------------------------
# DataModule
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("packing", [True, False])
def test_datamodule_fraction(genome, cache_dir, packing: bool) -> None:
    dm = GenomeDataModule(fasta=[str(p) for p in genome.paths], seq_length=100, batch_size=4,
                          val_fraction=0.2, cache_dir=str(cache_dir), rc_prob=0.5, packing=packing)
    assert dm.vocab_size == 64 and isinstance(dm.tokenizer, NucleotideTokenizer)
    dm.prepare_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dm.setup("fit")
    assert not _covered(dm.train_dataset) & _covered(dm.val_dataset)
    assert isinstance(dm.train_dataset, PackedGenomeDataset) == packing
    assert isinstance(dm.val_dataset, PackedGenomeDataset) == packing
    assert dm.val_dataset.rc_prob == 0.0 and dm.val_dataset.stride == 100
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == (4, 100)
    assert dm.train_dataset.epoch == 0
    iter(dm.train_dataloader())
    assert dm.train_dataset.epoch == 1  # no trainer: counts epochs
    val = list(dm.val_dataloader())
    assert sum(len(b["labels"]) for b in val) == len(dm.val_dataset)
    assert len(dm.test_dataloader().dataset) == len(dm.val_dataset)
    # predict reads the validation split as validation does (one output line per window or document)
    assert dm.predict_dataloader().dataset is dm.val_dataset
    if not packing:
        assert _positions(dm.val_dataset) == [("c1", 800, 900), ("c1", 900, 1000), ("c2", 424, 524)]


def test_datamodule_val_contigs_and_no_val(genome, cache_dir) -> None:
    fasta = str(genome.paths[0])
    dm = GenomeDataModule(fasta=fasta, seq_length=100, val_contigs=["c2"], cache_dir=str(cache_dir))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dm.setup("fit")
    assert {contig for contig, _, _ in _spans(dm.val_dataset)} == {"c2"}
    dm2 = GenomeDataModule(fasta=fasta, seq_length=100, val_fraction=0.0, cache_dir=str(cache_dir))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dm2.setup("fit")
    assert dm2.val_dataloader() == []
    bad = GenomeDataModule(fasta=fasta, seq_length=100, val_contigs=["nope"], cache_dir=str(cache_dir))
    with pytest.raises(GenomeInputError, match="unknown contig 'nope'"):
        bad.setup("fit")


def test_datamodule_persistent_workers_see_epoch(genome, cache_dir) -> None:
    dm = GenomeDataModule(fasta=str(genome.paths[0]), seq_length=20, batch_size=64, num_workers=2,
                          val_fraction=0.0, rc_prob=0.5, seed=5, cache_dir=str(cache_dir))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dm.setup("fit")
    ds = dm.train_dataset
    loader = dm.train_dataloader()
    assert loader.persistent_workers

    runs = []
    for _ in range(2):
        seen = torch.cat([b["labels"] for b in loader])
        runs.append(seen)
    # rebuild what each epoch should contain, independent of shuffle order
    for epoch, seen in enumerate(runs):
        ds.set_epoch(epoch)
        expected = sorted(tuple(ds[i]["labels"].tolist()) for i in range(len(ds)))
        assert sorted(tuple(r) for r in seen.tolist()) == expected
    assert sorted(map(tuple, runs[0].tolist())) != sorted(map(tuple, runs[1].tolist()))


def test_bundled_lambda_default(tmp_path) -> None:
    lam = ROOT / "data" / "lambda_virus.fa.gz"
    if not lam.exists():
        pytest.skip("bundled data not present")
    dm = GenomeDataModule(fasta=str(lam), cache_dir=str(tmp_path))
    dm.setup("fit")
    # 48,502 bp: 43,651 train bases = 42 windows of 1,024 + a packed end of 643; 4,851 validation = 4 + 755
    assert len(dm.train_dataset) == 43 and len(dm.val_dataset) == 5
    windows = GenomeDataModule(fasta=str(lam), cache_dir=str(tmp_path), packing=False)
    windows.setup("fit")
    assert len(windows.train_dataset) == 42 and len(windows.val_dataset) == 4
