"""The corpus's splits: near-duplicate strains grouped, then held out whole, by the manifest alone.

A near-duplicate of a held-out strain must be held out with it, or the held-out score measures
memory. Strains of a species closer than :data:`NEAR_DUPLICATE_DISTANCE` (by their sketches,
:mod:`~biomoe.data.sources.corpus_sketch`) form one cluster; whole species and whole clusters are
then held out by a hash of their names, so the split file (``data/corpus-splits.tsv``) follows
from the manifest alone, whatever its order.
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from biomoe.data.sources.corpus import CorpusEntry
from biomoe.data.sources.corpus_sketch import jaccard, mash_distance
from biomoe.errors import GenomeInputError
from biomoe.files import atomic_write

__all__ = ["ACCESSORY_GROUPS", "NEAR_DUPLICATE_DISTANCE", "SPECIES_HOLDOUT_FRACTION", "SPLITS", "SPLIT_COLUMNS",
           "SplitRow", "assign_splits", "build_splits", "read_splits", "strain_clusters", "write_splits"]

NEAR_DUPLICATE_DISTANCE = 0.005
"""Mash distance (about 1 - average nucleotide identity) below which two strains of one species
count as one: closer than 99.5 % ANI, one is nearly a copy of the other and must not sit on the
other side of a split."""

SPECIES_HOLDOUT_FRACTION = 0.1
"""Share of species held out whole (at least one)."""

ACCESSORY_GROUPS = frozenset({"plasmid", "mitochondrion", "chloroplast"})
"""Groups that are not a species' own chromosomes: such a file alone does not stand for the species."""

SPLIT_COLUMNS = ("file", "species", "strain", "cluster", "split", "nearest_train", "jaccard_to_train")
SPLITS = ("train", "heldout-strain", "heldout-species")


def _key(text: str) -> str:
    """Deterministic, order-free choices: by a hash of the name, not by manifest position."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def strain_clusters(entries: Sequence[CorpusEntry], sketches: Mapping[str, np.ndarray],
                    max_distance: float = NEAR_DUPLICATE_DISTANCE) -> dict[str, str]:
    """``file -> cluster`` name. Within a species, files of one strain (a chromosome and its
    plasmids) and strains closer than ``max_distance`` share a cluster (single linkage, so a
    chain of near-duplicates is one cluster). The name is the species and the cluster's first
    strain in sorted order."""
    parent = {entry.file: entry.file for entry in entries}

    def find(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    by_species: dict[str, list[CorpusEntry]] = {}
    for entry in entries:
        by_species.setdefault(entry.species, []).append(entry)
    for members in by_species.values():
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                if a.strain == b.strain or mash_distance(jaccard(sketches[a.file], sketches[b.file])) <= max_distance:
                    union(a.file, b.file)
    strains: dict[str, set[str]] = {}
    for entry in entries:
        strains.setdefault(find(entry.file), set()).add(entry.strain)
    species = {entry.file: entry.species for entry in entries}
    return {entry.file: f"{species[entry.file]} {sorted(strains[find(entry.file)])[0]}" for entry in entries}


@dataclass(frozen=True)
class SplitRow:
    file: str
    species: str
    strain: str
    cluster: str
    split: str
    nearest_train: str = ""
    jaccard_to_train: float = 0.0


def assign_splits(entries: Sequence[CorpusEntry], clusters: Mapping[str, str],
                  species_fraction: float = SPECIES_HOLDOUT_FRACTION) -> dict[str, str]:
    """``file -> split``, decided by the manifest alone:

    * **heldout-species**: the ``species_fraction`` of species (at least one) with the smallest
      name hashes, chosen among species of a single cluster that have a chromosome in the corpus:
      every species with several strains keeps them for the strain hold-out, and a held-out species
      is a genome, not a lone plasmid or organelle;
    * **heldout-strain**: in every other species with two or more clusters, the cluster with the
      smallest name hash; the species' other clusters stay in train, so these files measure
      generalisation to a new strain of a species the model has seen;
    * **train**: the rest."""
    by_species: dict[str, set[str]] = {}
    chromosomal: set[str] = set()
    for entry in entries:
        by_species.setdefault(entry.species, set()).add(clusters[entry.file])
        if entry.group not in ACCESSORY_GROUPS:
            chromosomal.add(entry.species)
    singles = sorted((name for name, found in by_species.items() if len(found) == 1 and name in chromosomal), key=_key)
    wanted = max(1, round(species_fraction * len(by_species))) if by_species else 0
    held_species = set(singles[:wanted])
    held_clusters = {min(found, key=_key) for name, found in by_species.items()
                     if len(found) > 1 and name not in held_species}
    splits = {}
    for entry in entries:
        if entry.species in held_species:
            splits[entry.file] = "heldout-species"
        elif clusters[entry.file] in held_clusters:
            splits[entry.file] = "heldout-strain"
        else:
            splits[entry.file] = "train"
    return splits


def build_splits(entries: Sequence[CorpusEntry], sketches: Mapping[str, np.ndarray],
                 max_distance: float = NEAR_DUPLICATE_DISTANCE,
                 species_fraction: float = SPECIES_HOLDOUT_FRACTION) -> list[SplitRow]:
    """Clusters, splits, and for each held-out file the most similar train file (the leak a
    reader of a held-out score wants to know about)."""
    clusters = strain_clusters(entries, sketches, max_distance)
    splits = assign_splits(entries, clusters, species_fraction)
    train = [entry.file for entry in entries if splits[entry.file] == "train"]
    rows = []
    for entry in entries:
        nearest, best = "", 0.0
        if splits[entry.file] != "train":
            for other in train:
                similarity = jaccard(sketches[entry.file], sketches[other])
                if similarity > best:
                    nearest, best = other, similarity
        rows.append(SplitRow(entry.file, entry.species, entry.strain, clusters[entry.file],
                             splits[entry.file], nearest, round(best, 4)))
    return rows


def write_splits(path: str | Path, rows: Sequence[SplitRow]) -> None:
    with atomic_write(path, "w") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(SPLIT_COLUMNS)
        for row in rows:
            writer.writerow([getattr(row, column) for column in SPLIT_COLUMNS])


def read_splits(path: str | Path) -> dict[str, str]:
    """``file -> split`` of a split file (for configs and checks that pick a split's files).

    A line without a file name or a split (a column left out) is an error naming the file and the
    line: dropped silently, its file would be left out of every split chosen by name."""
    with open(path, encoding="utf-8") as handle:
        rows = csv.DictReader(handle, delimiter="\t")
        missing = [column for column in ("file", "split") if column not in (rows.fieldnames or [])]
        if missing:
            raise GenomeInputError(path, f"line 1: no {' or '.join(missing)} column in the header "
                                         f"(expected {', '.join(SPLIT_COLUMNS)}, tab-separated)")
        found: dict[str, str] = {}
        for row in rows:
            file, split = (row.get("file") or "").strip(), (row.get("split") or "").strip()
            if not file or not split:
                raise GenomeInputError(path, f"line {rows.line_num}: no {'file name' if not file else 'split'} "
                                             f"(each line needs the columns {', '.join(SPLIT_COLUMNS)}, "
                                             "tab-separated)")
            found[file] = split
        return found
