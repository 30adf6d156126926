"""A genome that is not FASTA: a reader held in memory trains, validates, splits and scores like a
FASTA genome, whether handed to the datamodule directly or found by its file suffix."""

from __future__ import annotations

import warnings
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch

from biomoe.data.datamodule import GenomeDataModule
from biomoe.data.sources import registry
from biomoe.data.sources.genome import Genome
from biomoe.data.sources.reader import ContigInfo, SequenceReader
from biomoe.data.tokenizer import BOS_ID, NucleotideTokenizer
from biomoe.errors import GenomeInputError
from biomoe.inference.scoring import sequence_log_likelihood
from biomoe.model.config import ModelConfig, OptimConfig
from biomoe.training.step.lightning_module import BioMoEModule
from conftest import random_dna


class MemoryReader:
    """The smallest SequenceReader: contigs held as strings, one 'file' per genome label."""

    def __init__(self, genomes: dict[str, dict[str, str]]) -> None:
        self.labels = list(genomes)
        self.paths = [Path(f"{label}.mem") for label in genomes]
        self.contigs: list[ContigInfo] = []
        self._bases: list[str] = []
        for file_index, contigs in enumerate(genomes.values()):
            for name, bases in contigs.items():
                self.contigs.append(ContigInfo(name, len(bases), self.paths[file_index], file_index=file_index))
                self._bases.append(bases)
        self._index = {c.name: i for i, c in enumerate(self.contigs)}

    def fetch(self, contig: str | int, start: int, end: int) -> str:
        index = self._index[contig] if isinstance(contig, str) else contig
        if not 0 <= start <= end <= self.contigs[index].length:
            raise IndexError(f"{self.contigs[index].name}:{start}-{end}")
        return self._bases[index][start:end]


def _reader() -> MemoryReader:
    return MemoryReader({"alpha": {"a1": random_dna(1200, 1), "a2": random_dna(800, 2)},
                         "beta": {"b1": random_dna(1000, 3)[:500] + "N" * 40 + random_dna(460, 4)}})


def _tiny_module() -> BioMoEModule:
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                      ffn_hidden_size=32)
    return BioMoEModule(cfg, OptimConfig(lr=3e-3, warmup_steps=1), log_expert_load_every_n_steps=0)


def test_fasta_genome_and_memory_reader_both_implement_the_protocol(write_fasta, cache_dir) -> None:
    assert isinstance(_reader(), SequenceReader)
    assert isinstance(Genome(write_fasta({"c": random_dna(200)}), cache_dir=cache_dir), SequenceReader)


def test_batches_are_the_readers_bases_and_splits_share_none() -> None:
    reader = _reader()
    # fixed windows (packing off): every row is one reader window, named by dataset.window(i)
    dm = GenomeDataModule.from_reader(reader, seq_length=50, batch_size=4, val_fraction=0.2, rc_prob=0.0,
                                      packing=False)
    dm.setup("fit")
    assert dm.hparams["fasta"] == ["alpha.mem", "beta.mem"]  # checkpoints record what was read
    assert dm.genome_labels == ["alpha", "beta"] and dm.train_bases == 960 + 640 + 800
    tokenizer = NucleotideTokenizer()
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == (4, 50)
    for row, index in enumerate(next(iter(dm.train_dataloader().batch_sampler))):
        name, start, end = dm.train_dataset.window(index)
        expected = torch.from_numpy(tokenizer.encode(reader.fetch(name, start, end)))
        assert torch.equal(batch["labels"][row], expected)
        assert batch["input_ids"][row, 0] == BOS_ID and torch.equal(batch["input_ids"][row, 1:], expected[:-1])

    def covered(dataset) -> set[tuple[str, int]]:
        return {(c, p) for i in range(len(dataset)) for c, s, e in [dataset.window(i)] for p in range(s, e)}

    assert not covered(dm.train_dataset) & covered(dm.val_dataset)
    assert {int(dm.val_dataset[i]["genome"]) for i in range(len(dm.val_dataset))} == {0, 1}


def test_held_out_files_and_contigs_are_named_as_the_reader_names_them() -> None:
    dm = GenomeDataModule.from_reader(_reader(), seq_length=50, val_files=["beta"], test_contigs=["a2"],
                                      val_fraction=0.0, packing=False)
    dm.setup("fit")
    assert {dm.val_dataset.window(i)[0] for i in range(len(dm.val_dataset))} == {"b1"}
    assert {dm.test_dataset.window(i)[0] for i in range(len(dm.test_dataset))} == {"a2"}
    assert {dm.train_dataset.window(i)[0] for i in range(len(dm.train_dataset))} == {"a1"}
    bad = GenomeDataModule.from_reader(_reader(), seq_length=50, val_contigs=["chrZ"])
    with pytest.raises(GenomeInputError, match=r"^alpha\.mem, beta\.mem: val_contigs: unknown contig 'chrZ'"):
        bad.setup("fit")


def test_a_model_trains_validates_and_scores_on_a_memory_reader(tmp_path: Path) -> None:
    torch.manual_seed(0)
    reader = _reader()
    dm = GenomeDataModule.from_reader(reader, seq_length=64, batch_size=4, val_fraction=0.2)
    module = _tiny_module()
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        limit_val_batches=2, default_root_dir=tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, datamodule=dm)
        result = trainer.validate(module, datamodule=dm, verbose=False)[0]
    assert trainer.global_step == 2 and np.isfinite(result["val/bits_per_base"])

    model = module.model.eval()
    gap = reader.fetch("b1", 480, 560)  # 20 bases, 40 N, 20 bases
    whole, part = sequence_log_likelihood(model, [reader.fetch("a1", 0, 100), gap])
    assert whole.shape == (100,) and np.isfinite(whole).all() and (whole < 0).all()
    assert np.isnan(part[20:60]).all() and np.isfinite(part[:20]).all() and np.isfinite(part[60:]).all()


def _write_table(path: Path, contigs: dict[str, str]) -> Path:
    path.write_text("".join(f"{name}\t{bases}\n" for name, bases in contigs.items()))
    return path


def _open_tables(files: list[Path], cache_dir: Path | None) -> MemoryReader:
    """A toy format: one ``name<TAB>bases`` line per contig."""
    genomes = {}
    for path in files:
        genomes[path.name.split(".")[0]] = dict(line.split("\t") for line in path.read_text().splitlines())
    reader = MemoryReader(genomes)
    reader.paths = list(files)
    return reader


@pytest.fixture
def tables_registered(monkeypatch):
    monkeypatch.setattr(registry, "_READERS", {})
    monkeypatch.setattr(registry, "_entry_points_loaded", True)
    registry.register_reader([".seqs", ".seqs.txt"], _open_tables)


def test_a_registered_suffix_picks_its_reader(tables_registered, tmp_path, write_fasta) -> None:
    a = _write_table(tmp_path / "a.seqs", {"x": random_dna(600, 5)})
    b = _write_table(tmp_path / "b.SEQS.txt", {"y": random_dna(400, 6)})
    dm = GenomeDataModule(fasta=[str(a), str(b)], seq_length=100, val_fraction=0.25, packing=False)  # windows counted
    dm.setup("fit")
    assert isinstance(dm.genome, MemoryReader) and dm.genome_labels == ["a", "b"]
    assert len(dm.train_dataset) == 4 + 3 and len(dm.val_dataset) == 1 + 1
    assert isinstance(registry.open_reader(write_fasta({"c": random_dna(300)})), Genome)  # FASTA stays FASTA
    with pytest.raises(GenomeInputError, match=r"^data\.fasta: .*a\.seqs and .*\.fa are of different formats"):
        registry.open_reader([a, write_fasta({"c": random_dna(300)})])


def test_installed_packages_register_readers_by_entry_point(monkeypatch, tmp_path) -> None:
    import importlib.metadata

    class Point:
        name = ".seqs"

        @staticmethod
        def load():
            return _open_tables

    monkeypatch.setattr(registry, "_READERS", {})
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group: [Point] if group == registry.ENTRY_POINT_GROUP else [])
    reader = registry.open_reader(_write_table(tmp_path / "g.seqs", {"z": "ACGT" * 10}))
    assert isinstance(reader, MemoryReader) and reader.fetch("z", 0, 6) == "ACGTAC"
    assert registry.registered_suffixes() == [".seqs"]
