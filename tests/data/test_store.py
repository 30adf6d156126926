"""The prepared corpus store: exact round trip, size, checksums, refusals, sharding across ranks and
workers, and training from a store exactly as from its FASTA files."""

from __future__ import annotations

import io
import json
import os
import struct
import warnings
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from lightning.fabric.utilities.distributed import DistributedSamplerWrapper
from torch.utils.data import DataLoader, Dataset

from biomoe.cli.main import main
from biomoe.data.datamodule import GenomeDataModule
from biomoe.data.dataset import GenomeWindowDataset
from biomoe.data.samplers import EpochSeededRandomSampler, ResumableBatchSampler
from biomoe.data.sources import store as store_module
from biomoe.data.sources.corpus import CorpusEntry, write_manifest
from biomoe.data.sources.corpus_splits import SplitRow, write_splits
from biomoe.data.sources.genome import Genome
from biomoe.data.sources.registry import open_reader
from biomoe.data.sources.store import MANIFEST, StoreReader
from biomoe.data.sources.store_prepare import prepare_store
from biomoe.data.sources.store_twobit import RecordEncoder, TwoBitFile, iter_pieces, write_twobit
from biomoe.errors import GenomeInputError
from biomoe.model.config import ModelConfig, OptimConfig
from biomoe.training.step.lightning_module import BioMoEModule
from conftest import error_line, fasta_text


def genome_text(length: int, seed: int, n_rate: float = 0.01, iupac_rate: float = 0.002,
                mask_run: int = 40) -> str:
    """Random bases with N runs, IUPAC codes and soft-masked (lowercase) runs of varied lengths."""
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"ACGT", dtype=np.uint8)[rng.integers(0, 4, length)].copy()
    for start in np.flatnonzero(rng.random(length) < n_rate / 20):
        letters[start:start + int(rng.integers(1, 60))] = ord("N")
    iupac = np.frombuffer(b"RYSWKMBDHV", dtype=np.uint8)
    hits = np.flatnonzero(rng.random(length) < iupac_rate)
    letters[hits] = iupac[rng.integers(0, len(iupac), len(hits))]
    switches = np.flatnonzero(rng.random(length) < 1 / mask_run)
    lower = (np.cumsum(np.isin(np.arange(length), switches)) % 2).astype(bool)
    letters[lower] |= 0x20
    return letters.tobytes().decode("ascii")


@pytest.fixture
def inputs(tmp_path: Path, write_fasta) -> list[Path]:
    """Two genomes (one gzip) whose files share a contig name, lengths not multiples of 4."""
    a = write_fasta({"chr1": genome_text(9_001, 1), "chr2": genome_text(3_333, 2), "tiny": "acgTN"}, name="a.fa")
    b = write_fasta({"chr1": genome_text(6_002, 3), "plasmid": genome_text(2_047, 4)}, name="b.fa.gz",
                    compression="gzip")
    return [a, b]


@pytest.fixture
def store(inputs: list[Path], tmp_path: Path, cache_dir: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the repeated contig name, namespaced
        prepare_store(inputs, tmp_path / "g.store", shard_bases=12_000, cache_dir=cache_dir, say=lambda _: None)
    return tmp_path / "g.store"


def fasta_genome(inputs: list[Path], cache_dir: Path) -> Genome:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Genome(inputs, cache_dir=cache_dir)


def test_round_trip_of_bases_n_runs_iupac_and_soft_masking(inputs, store, cache_dir) -> None:
    fasta = fasta_genome(inputs, cache_dir)
    reader = open_reader(store, cache_dir=cache_dir)
    assert isinstance(reader, StoreReader) and len(reader.shard_paths) > 1
    assert reader.labels == fasta.labels == ["a", "b"]
    assert [(c.name, c.record, c.length, c.file_index) for c in reader.contigs] == \
           [(c.name, c.record, c.length, c.file_index) for c in fasta.contigs]
    rng = np.random.default_rng(0)
    for index, contig in enumerate(fasta.contigs):
        assert reader.fetch(contig.name, 0, contig.length) == fasta.fetch(index, 0, contig.length)
        for _ in range(100):
            start = int(rng.integers(0, contig.length + 1))
            end = int(rng.integers(start, contig.length + 1))
            assert reader.fetch(index, start, end) == fasta.fetch(index, start, end)
    with pytest.raises(IndexError):
        reader.fetch(0, 0, reader.contigs[0].length + 1)


def test_a_sequence_packed_in_pieces_equals_it_packed_whole() -> None:
    """Runs of N and of lowercase that cross a piece boundary are one run, as in one piece."""
    text = genome_text(5_003, 7, n_rate=0.2, mask_run=9)
    whole, pieces = RecordEncoder("x"), RecordEncoder("x")
    whole.add(text)
    for start, end in iter_pieces(len(text), 12):
        pieces.add(text[start:end])
    a, b = whole.finish(), pieces.finish()
    assert a.packed == b.packed and a.exceptions.runs() == b.exceptions.runs()
    for name in ("n_starts", "n_sizes", "mask_starts", "mask_sizes"):
        assert np.array_equal(getattr(a, name), getattr(b, name))


def test_shards_are_ucsc_twobit_files() -> None:
    """The bytes of the .2bit specification for one record ``ACGTn``: twoBitToFa and other tools read it."""
    encoder = RecordEncoder("x")
    encoder.add("ACGTn")
    out = io.BytesIO()
    write_twobit(out, [encoder.finish()])
    header = struct.pack("<4I", 0x1A412743, 0, 1, 0) + b"\x01x" + struct.pack("<I", 22)
    # dnaSize 5; one N block (4, 1); one mask block (4, 1); reserved; A=10 C=01 G=11 T=00, then N as T
    record = struct.pack("<8I", 5, 1, 4, 1, 1, 4, 1, 0) + bytes([0b10011100, 0])
    assert out.getvalue() == header + record


def test_realistic_genome_takes_at_most_027_bytes_per_base(tmp_path, write_fasta, cache_dir) -> None:
    """A soft-masked eukaryote-like chromosome (repeat runs of hundreds of bases, as RepeatMasker
    annotates, a few assembly gaps), a bacterial chromosome and a plasmid (unmasked)."""
    rng = np.random.default_rng(5)
    chromosome = np.frombuffer(genome_text(1_500_000, 8, n_rate=0.0, iupac_rate=0.0, mask_run=10**9).encode(),
                               dtype=np.uint8).copy()
    at = 0
    while at < len(chromosome):
        at += int(rng.lognormal(6.5, 0.8))  # unmasked stretch, median ~660 bp
        size = int(rng.lognormal(5.7, 0.9))  # a repeat, median ~300 bp
        chromosome[at:at + size] |= 0x20
        at += size
    for gap in rng.integers(0, len(chromosome) - 10_000, 5):
        chromosome[gap:gap + int(rng.integers(100, 10_000))] = ord("N")
    records = {"chrA": chromosome.tobytes().decode(), "bacterium": genome_text(800_000, 9, 0, 0, 10**9).upper(),
               "plasmid": genome_text(60_000, 10, 0, 0, 10**9).upper()}
    path = write_fasta(records, name="realistic.fa")
    result = prepare_store([path], tmp_path / "r.store", cache_dir=cache_dir, say=lambda _: None)
    on_disk = sum(p.stat().st_size for p in (tmp_path / "r.store").iterdir())
    assert result.bytes == on_disk and result.bases == sum(len(s) for s in records.values())
    assert on_disk / result.bases <= 0.27


def test_damaged_shard_is_one_line_naming_it_and_exit_2(store, capsys) -> None:
    shard = store / "shard-00000.2bit"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF  # same size, one base changed
    shard.write_bytes(bytes(data))
    code = main(["markov", str(store), "--max-order", "1", "--seq-length", "64"])
    line = error_line(capsys.readouterr().err)
    assert code == 2 and str(shard) in line and "sha256" in line


def test_each_shard_is_hashed_once_per_file_state(store, cache_dir, monkeypatch) -> None:
    hashed: list[Path] = []
    real = store_module.sha256_file
    monkeypatch.setattr(store_module, "sha256_file", lambda path: hashed.append(path) or real(path))
    StoreReader(store, cache_dir=cache_dir)
    StoreReader(store, cache_dir=cache_dir)
    shards = json.loads((store / MANIFEST).read_text())["shards"]
    files = [s["file"] for s in shards] + [s["mask"]["file"] for s in shards if "mask" in s]
    assert sorted(hashed) == sorted(store / f for f in files)  # each once, not again
    shard = store / "shard-00001.2bit"
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 10**9))  # touched: checked again
    StoreReader(store, cache_dir=cache_dir)
    assert hashed[-1] == shard


def test_refuses_to_overwrite(inputs, store, tmp_path, capsys) -> None:
    before = {p.name: p.read_bytes() for p in store.iterdir()}
    args = [str(p) for p in inputs]
    assert main(["prepare", *args, "--out", str(store), "--shard-bases", "12000"]) == 0  # the same store
    assert "already the store of these inputs" in capsys.readouterr().out
    assert main(["prepare", str(inputs[0]), "--out", str(store)]) == 2  # other inputs
    assert "store of other inputs" in error_line(capsys.readouterr().err)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert main(["prepare", *args, "--out", str(other)]) == 2
    assert str(other) in error_line(capsys.readouterr().err) and (other / "notes.txt").read_text() == "mine"
    assert main(["prepare", *args, "--out", str(inputs[0])]) == 2
    assert "input" in error_line(capsys.readouterr().err)
    assert {p.name: p.read_bytes() for p in store.iterdir()} == before


def test_corpus_manifest_records_metadata_and_split(tmp_path, write_fasta, cache_dir, capsys) -> None:
    corpus = tmp_path / "data" / "large" / "corpus"
    corpus.mkdir(parents=True)
    entries, rows = [], []
    for name, split in (("zeta.fa", "train"), ("alpha.fa", "heldout-species"), ("mid.fa", "train")):
        path = write_fasta({f"{name}_1": genome_text(2_000, len(name))}, name=name)
        path.rename(corpus / name)
        entries.append(CorpusEntry(name, f"species {name}", "s1", "chromosome", "deb", "pkg", "1", "m"))
        rows.append(SplitRow(name, f"species {name}", "s1", "c", split))
    write_manifest(tmp_path / "data" / "corpus.tsv", entries)
    write_splits(tmp_path / "data" / "corpus-splits.tsv", rows)
    out = tmp_path / "train.store"
    assert main(["prepare", str(tmp_path / "data" / "corpus.tsv"), "--split", "train", "--out", str(out),
                 "--cache-dir", str(cache_dir)]) == 0
    files = json.loads((out / MANIFEST).read_text())["files"]
    assert [f["name"] for f in files] == ["mid.fa", "zeta.fa"]  # the train files, in folder order
    assert {f["split"] for f in files} == {"train"} and files[1]["species"] == "species zeta.fa"
    capsys.readouterr()
    (corpus / "mid.fa").write_text(fasta_text({"mid.fa_1": "ACGT" * 10}))
    assert main(["prepare", str(tmp_path / "data" / "corpus.tsv"), "--out", str(tmp_path / "all.store"),
                 "--cache-dir", str(cache_dir)]) == 0  # no sha256 recorded: nothing to compare
    entries[2] = CorpusEntry(*[getattr(entries[2], f) for f in ("file", "species", "strain", "group", "source",
                                                                "package", "version", "member")], sha256="0" * 64)
    write_manifest(tmp_path / "data" / "corpus.tsv", entries)
    assert main(["prepare", str(tmp_path / "data" / "corpus.tsv"), "--out", str(tmp_path / "x.store")]) == 2
    assert "mid.fa: sha256 differs" in error_line(capsys.readouterr().err)
    assert not (tmp_path / "x.store").exists() and not list(tmp_path.glob(".x.store*"))


def test_a_store_and_fasta_files_together_are_refused(store, inputs) -> None:
    with pytest.raises(GenomeInputError, match="different formats"):
        open_reader([store, inputs[0]])


class _Tagged(Dataset):
    """Window items with the window's index and the process that read it."""

    def __init__(self, windows: GenomeWindowDataset) -> None:
        self.windows = windows

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        info = torch.utils.data.get_worker_info()
        return {**self.windows[index], "index": torch.tensor(index),
                "worker": torch.tensor(-1 if info is None else info.id)}


def _rank_loader(windows: GenomeWindowDataset, rank: int, workers: int) -> tuple[DataLoader, ResumableBatchSampler]:
    """The loader one of two ranks gets: Lightning wraps the seeded sampler in DistributedSamplerWrapper."""
    sampler = DistributedSamplerWrapper(EpochSeededRandomSampler(windows, seed=3), num_replicas=2, rank=rank,
                                        shuffle=False)
    batches = ResumableBatchSampler(sampler, 4, False)
    return DataLoader(_Tagged(windows), batch_sampler=batches, num_workers=workers), batches


@pytest.mark.slow
def test_two_ranks_two_workers_read_disjoint_windows_covering_the_set(store, inputs, cache_dir) -> None:
    reader = StoreReader(store, cache_dir=cache_dir)
    windows = GenomeWindowDataset(reader, 100, stride=50, max_n_fraction=1.0)
    assert len(windows) % 2 == 0  # DistributedSampler pads odd counts with repeats
    fasta = GenomeWindowDataset(fasta_genome(inputs, cache_dir), 100, stride=50, max_n_fraction=1.0)
    seen: list[int] = []
    for rank in range(2):
        loader, _ = _rank_loader(windows, rank, workers=2)
        batches = list(loader)
        assert {int(w) for b in batches for w in b["worker"]} == {0, 1}
        for batch in batches:
            for index, labels in zip(batch["index"].tolist(), batch["labels"]):
                assert torch.equal(labels, fasta[index]["labels"])
            seen.extend(batch["index"].tolist())
    assert len(seen) == len(set(seen)) == len(windows)


def test_order_per_rank_is_deterministic_and_resumable(store, cache_dir) -> None:
    windows = GenomeWindowDataset(StoreReader(store, cache_dir=cache_dir), 100, stride=50, max_n_fraction=1.0)
    loader, batches = _rank_loader(windows, 1, workers=0)
    first = [b["index"].tolist() for b in loader]
    assert [b["index"].tolist() for b in _rank_loader(windows, 1, workers=0)[0]] == first
    batches.skip_next(3)
    assert [b["index"].tolist() for b in loader] == first[3:]


def _datamodule(fasta, cache_dir: Path) -> GenomeDataModule:
    dm = GenomeDataModule(fasta=fasta, seq_length=64, stride=32, batch_size=4, rc_prob=0.5, mutation_prob=0.1,
                          val_fraction=0.1, test_files=["b"], sampling_temperature=2.0, seed=5,
                          cache_dir=str(cache_dir))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dm.setup("fit")
    return dm


def test_batches_from_a_store_equal_those_from_its_fasta(inputs, store, cache_dir) -> None:
    from_fasta, from_store = _datamodule([str(p) for p in inputs], cache_dir), _datamodule(str(store), cache_dir)
    for get in ("train_dataloader", "val_dataloader", "test_dataloader"):
        a, b = list(getattr(from_fasta, get)()), list(getattr(from_store, get)())
        assert len(a) == len(b) > 0
        for x, y in zip(a, b):
            assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def _tiny_module() -> BioMoEModule:
    torch.manual_seed(0)
    return BioMoEModule(ModelConfig(hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, num_experts=4,
                                    top_k=2, ffn_hidden_size=32), OptimConfig(lr=3e-3, warmup_steps=1))


@pytest.mark.slow
def test_fit_steps_from_a_store_equal_those_from_its_fasta(inputs, store, cache_dir, tmp_path) -> None:
    def fit(fasta) -> dict[str, torch.Tensor]:
        module = _tiny_module()
        trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=2, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                            default_root_dir=tmp_path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(module, datamodule=_datamodule(fasta, cache_dir))
        return {k: v.detach().clone() for k, v in module.state_dict().items()}

    from_fasta, from_store = fit([str(p) for p in inputs]), fit(str(store))
    initial = _tiny_module()
    initial.configure_model()  # the network is built when training starts
    start = initial.state_dict()
    assert start.keys() == from_fasta.keys()
    assert any(not torch.equal(start[k], from_fasta[k]) for k in start)  # training changed the weights
    assert all(torch.equal(from_fasta[k], from_store[k]) for k in from_fasta)


def test_soft_mask_runs_beside_the_shards_or_inside_them_read_back_the_same(inputs, store, tmp_path,
                                                                            cache_dir) -> None:
    """``--soft-mask compact`` (the default) keeps the lowercase runs in a deflated table beside each
    shard and none in the .2bit; ``twobit`` keeps them inside. Both read back the FASTA exactly, and a
    store of format version 1 (runs inside, no mask files) still reads."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepare_store(inputs, tmp_path / "t.store", shard_bases=12_000, cache_dir=cache_dir, soft_mask="twobit",
                      say=lambda _: None)
    compact = json.loads((store / MANIFEST).read_text())
    inside = json.loads((tmp_path / "t.store" / MANIFEST).read_text())
    assert all(s["mask"]["runs"] > 0 for s in compact["shards"]) and not any("mask" in s for s in inside["shards"])
    assert compact["bytes"] < inside["bytes"]
    for shard in compact["shards"]:  # the .2bit of a compact store has no mask block
        two_bit = TwoBitFile(store / shard["file"])
        assert all(len(two_bit.record(i).mask_starts) == 0 for i in range(len(two_bit.names)))
    fasta = fasta_genome(inputs, cache_dir)
    manifest = tmp_path / "t.store" / MANIFEST
    manifest.write_text(manifest.read_text().replace('"version": 2', '"version": 1'))
    for reader in (StoreReader(store, cache_dir=cache_dir), StoreReader(tmp_path / "t.store", cache_dir=cache_dir)):
        for index, contig in enumerate(fasta.contigs):
            text = reader.fetch(index, 0, contig.length)
            assert text == fasta.fetch(index, 0, contig.length) and any(c.islower() for c in text)


def test_damaged_mask_file_is_one_line_naming_it_and_exit_2(store, capsys) -> None:
    mask = store / "shard-00000.mask.npz"
    data = bytearray(mask.read_bytes())
    data[len(data) // 2] ^= 0xFF
    mask.write_bytes(bytes(data))
    code = main(["markov", str(store), "--max-order", "1", "--seq-length", "64"])
    line = error_line(capsys.readouterr().err)
    assert code == 2 and str(mask) in line and "sha256" in line


def test_a_splits_line_without_its_split_column_is_one_line_naming_file_and_line(tmp_path, write_fasta,
                                                                                  capsys) -> None:
    a = write_fasta({"a1": genome_text(2_000, 5)}, name="a.fa")
    b = write_fasta({"b1": genome_text(2_000, 6)}, name="b.fa")
    splits = tmp_path / "splits.tsv"
    write_splits(splits, [SplitRow("a.fa", "sp a", "s1", "c", "train"), SplitRow("b.fa", "sp b", "s1", "c", "train")])
    lines = splits.read_text().splitlines()
    lines[2] = "\t".join(lines[2].split("\t")[:4])  # b.fa's line, cut before its split column
    splits.write_text("\n".join(lines) + "\n")
    out = tmp_path / "train.store"
    assert main(["prepare", str(a), str(b), "--splits", str(splits), "--split", "train", "--out", str(out)]) == 2
    line = error_line(capsys.readouterr().err)
    assert str(splits) in line and "line 3" in line and "split" in line, line
    assert not out.exists()


def test_two_prepare_runs_into_one_folder_at_once_keep_one_store_without_a_traceback(inputs, tmp_path,
                                                                                      cache_dir) -> None:
    """The second run to finish finds the first one's store where it would rename its own."""
    out = tmp_path / "g.store"
    said: list[str] = []

    def other_run_finishes_first(line: str) -> None:
        said.append(line)
        if len(said) == 1:  # while this run writes its shards
            prepare_store(inputs, out, shard_bases=12_000, cache_dir=cache_dir, say=lambda _: None)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = prepare_store(inputs, out, shard_bases=12_000, cache_dir=cache_dir, say=other_run_finishes_first)
    assert not result.created and "another prepare run finished this store first" in said[-1]
    assert result.bases == sum(c.length for c in fasta_genome(inputs, cache_dir).contigs)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".g.store")] == []  # no copy left over
    StoreReader(out, cache_dir=cache_dir)  # the store stands, and reads


def test_a_concurrent_run_of_other_options_is_refused_in_one_line(inputs, tmp_path, cache_dir) -> None:
    out = tmp_path / "g.store"
    said: list[str] = []

    def other_run_finishes_first(line: str) -> None:
        said.append(line)
        if len(said) == 1:
            prepare_store(inputs, out, shard_bases=5_000, cache_dir=cache_dir, say=lambda _: None)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(GenomeInputError, match="store of other inputs or options"):
            prepare_store(inputs, out, shard_bases=12_000, cache_dir=cache_dir, say=other_run_finishes_first)
    assert json.loads((out / MANIFEST).read_text())["prepared_from"]["options"]["shard_bases"] == 5_000
