"""Data controls for many genomes: held-out files, a test split apart from validation, per-file
sampling shares, namespaced contig names and per-genome held-out numbers."""

from __future__ import annotations

import warnings
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch

from biomoe.data.datamodule import GenomeDataModule
from biomoe.data.samplers import EpochSeededRandomSampler, GenomeWeightedSampler, file_shares
from biomoe.data.splits import split_genome
from biomoe.data.sources.genome import Genome
from biomoe.errors import GenomeInputError
from biomoe.model.config import ConfigError, OptimConfig
from biomoe.data.packed import PackedGenomeDataset
from biomoe.training.reports.genome_metrics import PerGenomeMetrics
from biomoe.genomics.markov import training_sequences
from biomoe.training.step.lightning_module import BioMoEModule
from conftest import random_dna


@pytest.fixture
def three_genomes(write_fasta) -> list[Path]:
    """big (2 contigs, 4 kb), mid (2 kb), small (1 kb); 'contig_1' in big and small."""
    return [write_fasta({"contig_1": random_dna(3000, 1), "big_2": random_dna(1000, 2)}, name="big.fa"),
            write_fasta({"mid_1": random_dna(2000, 3)}, name="mid.fna.gz", compression="gzip"),
            write_fasta({"contig_1": random_dna(1000, 4)}, name="small.fa")]


def datamodule(paths, cache_dir, **kw) -> GenomeDataModule:
    dm = GenomeDataModule(fasta=[str(p) for p in paths], seq_length=100, batch_size=8, rc_prob=0.0,
                          cache_dir=str(cache_dir), **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dm.setup("fit")
    return dm


def files_of(dataset) -> set[int]:
    """The files of every window, or of every document of every packed row."""
    if isinstance(dataset, PackedGenomeDataset):
        return set(dataset.piece_files[dataset.table.pieces].tolist())
    return set(dataset.file_index.tolist())


def spans(dataset) -> list[tuple[str, int, int]]:
    """Every window, or every document of every packed row: (contig, start, end)."""
    if isinstance(dataset, PackedGenomeDataset):
        return [span for i in range(len(dataset)) for span in dataset.documents(i)]
    return [dataset.window(i) for i in range(len(dataset))]


def contigs_of(dataset) -> set[str]:
    return {contig for contig, _, _ in spans(dataset)}


def covered(dataset) -> set[tuple[str, int]]:
    return {(c, p) for c, s, e in spans(dataset) for p in range(s, e)}


def test_whole_files_held_out_for_validation_and_test(three_genomes, cache_dir) -> None:
    dm = datamodule(three_genomes, cache_dir, val_files=["mid"], test_files=["small.fa"], val_fraction=0.0)
    assert dm.genome_labels == ["big", "mid", "small"]
    assert files_of(dm.train_dataset) == {0}
    assert files_of(dm.val_dataset) == {1} and files_of(dm.test_dataset) == {2}
    assert dm.train_bases == 4000  # all of big, nothing of the held-out files
    # The Markov baseline is fitted on exactly the training regions: no base of a held-out file.
    assert sum(len(s) for s in training_sequences(dm)) == 4000
    item = dm.test_dataset[0]
    assert set(item["genome"].tolist()) <= {2, -1} and "genome" not in dm.train_dataset[0]  # -1: padding


def test_held_out_files_combine_with_a_fraction_of_the_others(three_genomes, cache_dir) -> None:
    dm = datamodule(three_genomes, cache_dir, test_files=[str(three_genomes[2])], val_fraction=0.2)
    assert files_of(dm.test_dataset) == {2}
    assert files_of(dm.val_dataset) == {0, 1}  # per-genome validation of every training genome
    assert not covered(dm.train_dataset) & covered(dm.val_dataset)


def test_test_fraction_is_its_own_split_and_leaves_validation_where_it_was(three_genomes, cache_dir) -> None:
    plain = datamodule(three_genomes, cache_dir, val_fraction=0.1)
    with_test = datamodule(three_genomes, cache_dir, val_fraction=0.1, test_fraction=0.2)
    train, val, test = (covered(d) for d in (with_test.train_dataset, with_test.val_dataset, with_test.test_dataset))
    assert test and not train & val and not train & test and not val & test
    assert val == covered(plain.val_dataset)
    splits = split_genome(with_test.genome, val_fraction=0.1, test_fraction=0.2)
    # mid_1 (2,000 bp): train [0, 1400), test [1400, 1800), validation [1800, 2000)
    mid = with_test.genome.index_of("mid_1")
    assert (mid, 0, 1400) in splits.train and (mid, 1400, 1800) in splits.test and (mid, 1800, 2000) in splits.val
    assert with_test.test_dataloader().dataset is with_test.test_dataset is not with_test.val_dataset


def test_test_without_a_test_split_says_it_uses_validation(three_genomes, cache_dir) -> None:
    dm = datamodule(three_genomes, cache_dir)
    with pytest.warns(UserWarning, match="no test split is configured"):
        loader = dm.test_dataloader()
    assert loader.dataset is dm.val_dataset


def test_held_out_contigs_for_test(three_genomes, cache_dir) -> None:
    dm = datamodule(three_genomes, cache_dir, test_contigs=["big_2"], val_contigs=["mid_1"])
    assert contigs_of(dm.test_dataset) == {"big_2"}
    assert contigs_of(dm.val_dataset) == {"mid_1"}


@pytest.mark.parametrize("settings, message", [
    ({"test_files": ["nope"]}, "data.test_files: no FASTA file 'nope' among the inputs (files: big, mid, small)"),
    ({"val_files": ["mid"], "test_files": ["mid"]}, "both hold out 'mid'"),
    ({"val_files": ["big", "mid"], "test_files": ["small"]}, "nothing is left to train on"),
    ({"val_contigs": ["contig_1"]}, "contig 'contig_1' is in several files; name one of big#contig_1, small#contig_1"),
    ({"test_contigs": ["mid_1"], "test_files": ["mid"]}, "its file 'mid' is held out whole"),
    ({"file_weights": {"nope": 2.0}}, "data.file_weights: no FASTA file 'nope'"),
])
def test_bad_held_out_settings_are_one_line_errors(three_genomes, cache_dir, settings, message) -> None:
    with pytest.raises(GenomeInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        datamodule(three_genomes, cache_dir, **settings)


def test_bad_fractions_and_weights_are_config_errors(three_genomes, cache_dir) -> None:
    with pytest.raises(ConfigError, match="data.val_fraction \\+ data.test_fraction must be below 1"):
        datamodule(three_genomes, cache_dir, val_fraction=0.5, test_fraction=0.5)
    with pytest.raises(ConfigError, match="data.sampling_temperature: must be > 0"):
        GenomeDataModule(fasta=str(three_genomes[0]), sampling_temperature=0)
    with pytest.raises(ConfigError, match=r"data.file_weights\[big\]: must be >= 0, got -1"):
        GenomeDataModule(fasta=str(three_genomes[0]), file_weights={"big": -1})


def test_namespaced_contigs_are_named_in_splits(three_genomes, cache_dir) -> None:
    dm = datamodule(three_genomes, cache_dir, val_contigs=["small#contig_1"])
    assert contigs_of(dm.val_dataset) == {"small#contig_1"}
    assert "big#contig_1" in contigs_of(dm.train_dataset)


def test_file_shares_follow_temperature_and_weights() -> None:
    files = np.array([0] * 40 + [1] * 10)  # 4:1 windows
    assert np.allclose(file_shares(files, 2, 1.0), [0.8, 0.2])
    assert np.allclose(file_shares(files, 2, 2.0), [2 / 3, 1 / 3])  # sqrt(40):sqrt(10)
    assert np.allclose(file_shares(files, 2, 1e9), [0.5, 0.5], atol=1e-6)
    assert np.allclose(file_shares(files, 3, 1.0, [1.0, 4.0, 7.0]), [0.5, 0.5, 0.0])  # file 2 has no windows
    with pytest.raises(ConfigError, match="weight 0"):
        file_shares(files, 2, 1.0, [0.0, 0.0])


def test_sampling_by_size_keeps_the_shuffle_and_temperature_balances_genomes(three_genomes, cache_dir) -> None:
    by_size = datamodule(three_genomes, cache_dir, val_fraction=0.0, stride=10)
    sampler = by_size.train_dataloader().batch_sampler.sampler
    assert isinstance(sampler, EpochSeededRandomSampler) and by_size.shares is None

    flat = datamodule(three_genomes, cache_dir, val_fraction=0.0, stride=10, sampling_temperature=1e6)
    loader = flat.train_dataloader()
    sampler = loader.batch_sampler.sampler
    assert isinstance(sampler, GenomeWeightedSampler)
    files = flat.train_dataset.file_index
    counts = np.bincount(files, minlength=3)
    assert counts[0] > 3 * counts[2]  # big has over three times the windows of small...
    drawn = np.bincount(files[list(sampler)], minlength=3) / len(sampler)
    assert np.allclose(drawn, 1 / 3, atol=0.05)  # ...but each genome is drawn equally often
    assert len(list(sampler)) == len(flat.train_dataset)


def test_weighted_draw_is_a_function_of_seed_and_epoch(three_genomes, cache_dir) -> None:
    dm = datamodule(three_genomes, cache_dir, val_fraction=0.0, stride=10, file_weights={"small": 5.0})
    sampler = GenomeWeightedSampler(dm.train_dataset, dm.shares, seed=3)
    first = list(sampler)
    assert list(GenomeWeightedSampler(dm.train_dataset, dm.shares, seed=3)) == first
    dm.train_dataset.set_epoch(1)  # the epoch comes from the dataset (also under DistributedSamplerWrapper)
    assert list(sampler) != first
    dm.train_dataset.set_epoch(0)
    assert list(sampler) == first
    weighted = np.bincount(dm.train_dataset.file_index[first], minlength=3) / len(first)
    assert weighted[2] == pytest.approx(dm.shares[2], abs=0.05) and dm.shares[2] > 0.4

    dropped = datamodule(three_genomes, cache_dir, val_fraction=0.0, stride=10, file_weights={"mid": 0})
    assert 1 not in set(dropped.train_dataset.file_index[list(dropped.train_dataloader().batch_sampler.sampler)])


@pytest.mark.parametrize("packing", [True, False])
def test_validation_reports_bits_per_base_per_genome(tiny_config, three_genomes, cache_dir, tmp_path,
                                                     packing: bool) -> None:
    """val/<genome>/bits_per_base per file; their token-weighted mean is the pooled number (packed rows
    hold documents of several files)."""
    torch.manual_seed(0)
    dm = datamodule(three_genomes, cache_dir, val_fraction=0.33, packing=packing)
    rows = [dm.val_dataset[i]["genome"] for i in range(len(dm.val_dataset))]
    assert any(len(set(g.reshape(-1).tolist()) - {-1}) > 1 for g in rows) == packing  # two files in one row
    cfg = tiny_config()
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                        callbacks=[PerGenomeMetrics()])
    result = trainer.validate(BioMoEModule(cfg, OptimConfig()), datamodule=dm, verbose=False)[0]
    per_genome = {label: result[f"val/{label}/bits_per_base"] for label in ("big", "mid", "small")}
    assert len(set(per_genome.values())) == 3
    bases = np.zeros(3)
    for i in range(len(dm.val_dataset)):
        item = dm.val_dataset[i]  # packed: a genome per token, -1 on padding (never scored)
        genome = torch.broadcast_to(item["genome"], item["loss_mask"].shape)
        np.add.at(bases, genome[item["loss_mask"]].numpy(), 1.0)
    pooled = sum(per_genome[label] * n for label, n in zip(("big", "mid", "small"), bases)) / bases.sum()
    assert result["val/bits_per_base"] == pytest.approx(pooled, rel=1e-4)


def test_a_batch_limit_that_leaves_genomes_out_says_so(tiny_config, three_genomes, cache_dir, tmp_path) -> None:
    dm = datamodule(three_genomes, cache_dir, val_fraction=0.3)
    cfg = tiny_config(num_layers=1)
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                        limit_val_batches=1, callbacks=[PerGenomeMetrics()])
    with pytest.warns(UserWarning, match=r"val: no val batch reached .*limit_val_batches=1"):
        result = trainer.validate(BioMoEModule(cfg, OptimConfig()), datamodule=dm, verbose=False)[0]
    assert "val/bits_per_base" in result


def test_one_genome_logs_no_per_genome_numbers(tiny_config, write_fasta, cache_dir, tmp_path) -> None:
    dm = datamodule([write_fasta({"c": random_dna(3000, 5)})], cache_dir)
    cfg = tiny_config(num_layers=1)
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                        callbacks=[PerGenomeMetrics()])
    result = trainer.validate(BioMoEModule(cfg, OptimConfig()), datamodule=dm, verbose=False)[0]
    assert not [key for key in result if key.count("/") == 2]


def test_from_hparams_ignores_unknown_keys(three_genomes, cache_dir) -> None:
    dm = GenomeDataModule.from_hparams({"fasta": str(three_genomes[0]), "seq_length": 64, "retired_key": 1},
                                       batch_size=3)
    assert dm.seq_length == 64 and dm.batch_size == 3
    assert Genome(dm.fasta, cache_dir=cache_dir).names == ["contig_1", "big_2"]


def test_weighted_sampling_resumes_mid_epoch_and_splits_between_ranks(three_genomes, cache_dir) -> None:
    """A resumed run sees the batches the uninterrupted one would have; under DDP Lightning wraps the
    sampler in DistributedSamplerWrapper, which must still give each rank its own part of the draw."""
    from lightning.fabric.utilities.distributed import DistributedSamplerWrapper

    dm = datamodule(three_genomes, cache_dir, val_fraction=0.0, stride=10, sampling_temperature=3.0)
    loader = dm.train_dataloader()
    batches = iter(loader)
    for _ in range(3):
        next(batches)
    state = loader.state_dict()
    expected = [b["labels"] for b in batches]
    resumed = datamodule(three_genomes, cache_dir, val_fraction=0.0, stride=10, sampling_temperature=3.0)
    again = resumed.train_dataloader()
    again.load_state_dict(state)
    got = [b["labels"] for b in again]
    assert len(got) == len(expected) and all(torch.equal(a, b) for a, b in zip(got, expected))

    sampler = GenomeWeightedSampler(dm.train_dataset, dm.shares, seed=0)
    draw = list(sampler)
    ranks = [list(DistributedSamplerWrapper(sampler, num_replicas=2, rank=r, shuffle=False)) for r in (0, 1)]
    padded = draw + draw[: 2 * len(ranks[0]) - len(draw)]  # DistributedSampler pads to equal shares
    assert ranks[0] == padded[0::2] and ranks[1] == padded[1::2]
    dm.train_dataset.set_epoch(1)
    assert list(DistributedSamplerWrapper(sampler, num_replicas=2, rank=0, shuffle=False)) != ranks[0]
