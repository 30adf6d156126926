"""What the experts see: the genomic classes of the bases each MoE block routes to each expert.

``biomoe routing --features`` labels every base of every routed window with

* its **region**: coding (inside a gene called by Prodigal, either strand) or non-coding;
* for coding bases, the **codon position** (1, 2 or 3, counted in the gene's own reading direction,
  so a minus-strand gene's first codon base is its highest coordinate) and the **gene strand**;
* the **GC content of its window** (ACGT bases only), in fixed bins (:data:`GC_CLASSES`): fixed
  rather than quantiles so that a bin means the same on every genome and in every run.

Genes are called as ``biomoe mutations`` calls them
(:func:`biomoe.genomics.genes.call_genes_in_contigs`: one gene model trained on the genome when it
holds at least 20 kb, else Prodigal's meta mode).

Every base gets one *cell* (its region/codon/strand *state* and its window's GC bin), and the
router hooks count top-k assignments per (cell, expert); each class is a sum of cells, so region,
window GC and species each add up to all assignments, codon position and gene strand to the coding
ones. The **species** group comes from the per-genome counts. Per MoE block, class group and expert
the report holds the counts (pooled over the genomes, so each genome weighs by its routed windows;
every genome's own counts are kept too), the *fraction* of the expert's assignments in the group
that fall in each class, and the *enrichment*: that fraction over the class's share of all the
group's assignments (1 = the expert takes the class as often as the data offers it). Codon position
and gene strand are defined on coding bases only, so their fractions and shares are of coding
assignments. A fraction or enrichment with a zero denominator is ``None``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from biomoe.data.sources.reader import SequenceReader
from biomoe.errors import GenomeInputError
from biomoe.genomics.genes import MIN_TRAINING_BASES, Gene, call_genes_in_contigs, codon_position, coding_strand

__all__ = ["GC_BINS", "GC_CLASSES", "GROUPS", "NUM_CELLS", "NUM_STATES", "GenomeFeatures", "base_states",
           "class_counts", "enrichment_table", "features_report", "gc_bin", "genome_features",
           "require_gene_caller"]

GC_EDGES = (0.35, 0.45, 0.55)
"""Upper edges of the window GC bins (a window at exactly 45 % is in the 45-55 % bin)."""
GC_CLASSES = ("GC<35%", "GC 35-45%", "GC 45-55%", "GC>=55%")
GC_BINS = len(GC_CLASSES)
STATE_NAMES = ("non-coding", "+1", "+2", "+3", "-1", "-2", "-3")
"""A base's state: non-coding, or (gene strand, codon position)."""
NUM_STATES = len(STATE_NAMES)
NUM_CELLS = NUM_STATES * GC_BINS
"""Cell of a base = state * GC_BINS + GC bin of its window."""


def _cells_of(states: Sequence[int] | None = None, gc: Sequence[int] | None = None) -> np.ndarray:
    """Boolean mask over cells: the given states (all when None) in the given GC bins (all when None)."""
    mask = np.zeros((NUM_STATES, GC_BINS), dtype=bool)
    mask[np.ix_(list(range(NUM_STATES)) if states is None else list(states),
                list(range(GC_BINS)) if gc is None else list(gc))] = True
    return mask.reshape(-1)


GROUPS: dict[str, tuple[tuple[str, np.ndarray], ...]] = {
    "region": (("coding", _cells_of(states=range(1, 7))), ("non-coding", _cells_of(states=[0]))),
    "codon_position": tuple((f"codon {p}", _cells_of(states=[p, 3 + p])) for p in (1, 2, 3)),
    "gene_strand": (("+ strand", _cells_of(states=[1, 2, 3])), ("- strand", _cells_of(states=[4, 5, 6]))),
    "window_gc": tuple((name, _cells_of(gc=[b])) for b, name in enumerate(GC_CLASSES)),
}
"""Class groups counted per base, each class as the cells it sums (species is added per genome)."""


def require_gene_caller() -> None:
    """Fail before the model loads when genes cannot be called."""
    if importlib.util.find_spec("pyrodigal") is None:
        raise GenomeInputError(None, "--features calls genes with pyrodigal: pip install pyrodigal")


def base_states(genes: Sequence[Gene], length: int, contig: str | None = None) -> np.ndarray:
    """int8 state per base of a contig (index into :data:`STATE_NAMES`). Strand and codon position
    come from the same gene where genes overlap (both views let the later gene win)."""
    strand = coding_strand(genes, length, contig)
    position = codon_position(genes, length, contig)
    return np.where(strand > 0, position, np.where(strand < 0, 3 + position, 0)).astype(np.int8)


def gc_bin(bases: str) -> int:
    """GC bin of a window from its A/C/G/T bases (an all-N window, never routed, is bin 0)."""
    upper = bases.upper()
    gc = upper.count("G") + upper.count("C")
    acgt = gc + upper.count("A") + upper.count("T")
    return int(np.searchsorted(GC_EDGES, gc / acgt, side="right")) if acgt else 0


@dataclass
class GenomeFeatures:
    """One genome's gene calls as base states per contig (indexed like ``reader.contigs``)."""

    label: str
    genes: int
    mode: str  # "single" (a gene model trained on the genome) or "meta"
    coding_fraction: float
    states: list[np.ndarray]

    def window_cells(self, contig: int, start: int, bases: str) -> np.ndarray:
        """int64 cell per base of the window ``bases`` that starts at ``start`` of ``contig``."""
        states = self.states[contig][start:start + len(bases)].astype(np.int64)
        return states * GC_BINS + gc_bin(bases)

    def summary(self) -> dict[str, Any]:
        """What the JSON keeps of the gene calls: enough to judge them, not the per-base arrays."""
        return {"genes": self.genes, "gene_mode": self.mode, "coding_fraction": self.coding_fraction}


def genome_features(genome: SequenceReader, label: str) -> GenomeFeatures:
    """Call the genes of a genome (every contig of the reader) and keep their per-base states."""
    contigs = {c.name: genome.fetch(c.name, 0, c.length).upper() for c in genome.contigs}
    genes = call_genes_in_contigs(contigs)
    states = [base_states(genes, c.length, c.name) for c in genome.contigs]
    total = sum(c.length for c in genome.contigs)
    coding = sum(int(np.count_nonzero(s)) for s in states)
    return GenomeFeatures(label, len(genes), "meta" if total < MIN_TRAINING_BASES else "single",
                          coding / total if total else 0.0, states)


# ------------------------------------------------------------------------------------- summary
def class_counts(cell_counts: np.ndarray) -> dict[str, list[list[int]]]:
    """Counts [expert][class] of every group in :data:`GROUPS` from counts [cell, expert]."""
    cells = np.asarray(cell_counts, dtype=np.int64)
    return {group: np.stack([cells[mask].sum(axis=0) for _, mask in classes], axis=1).tolist()
            for group, classes in GROUPS.items()}


def enrichment_table(counts: Sequence[Sequence[int]]) -> dict[str, Any]:
    """Fractions and enrichment of one group from its counts [expert][class]."""
    n = np.asarray(counts, dtype=np.float64)
    per_expert = n.sum(axis=1, keepdims=True)
    share = n.sum(axis=0) / n.sum() if n.sum() > 0 else np.full(n.shape[1], np.nan)
    fraction = np.divide(n, per_expert, out=np.full_like(n, np.nan), where=per_expert > 0)
    enrichment = np.divide(fraction, share[None, :], out=np.full_like(n, np.nan),
                           where=np.isfinite(fraction) & (share[None, :] > 0))
    return {"counts": n.astype(np.int64).tolist(), "share": _nulls(share), "fraction": _nulls(fraction),
            "enrichment": _nulls(enrichment)}


def _nulls(values: np.ndarray) -> list:
    """A numpy array as (nested) lists of floats, NaN (an undefined ratio) as None: JSON has no NaN."""
    if values.ndim > 1:
        return [_nulls(row) for row in values]
    return [None if not np.isfinite(v) else float(v) for v in values]


def features_report(genomes: dict[str, dict[str, Any]], layers: Sequence[int]) -> dict[str, Any]:
    """The ``features`` section of the routing JSON.

    ``genomes``: label -> {"species", "counts" (the routing counts per layer, [expert]), "features"
    (:meth:`GenomeFeatures.summary` plus "cells": per layer, counts [cell][expert])}. Each genome
    keeps its class counts; ``per_layer`` pools every genome and adds the species group."""
    keys = [str(layer) for layer in layers]
    species = list(dict.fromkeys(entry["species"] for entry in genomes.values()))
    per_genome = {}
    for label, entry in genomes.items():
        features = entry["features"]
        per_genome[label] = {**{k: v for k, v in features.items() if k != "cells"},
                             "counts": {key: class_counts(features["cells"][key]) for key in keys}}
    per_layer = {}
    for key in keys:
        pooled: dict[str, np.ndarray] = {}
        for entry in per_genome.values():
            for group, counts in entry["counts"][key].items():
                pooled[group] = pooled.get(group, 0) + np.asarray(counts, dtype=np.int64)
        experts = len(next(iter(genomes.values()))["counts"][key])
        by_species = np.zeros((experts, len(species)), dtype=np.int64)
        for entry in genomes.values():
            by_species[:, species.index(entry["species"])] += np.asarray(entry["counts"][key], dtype=np.int64)
        pooled["species"] = by_species
        per_layer[key] = {group: enrichment_table(counts) for group, counts in pooled.items()}
    classes = {group: [name for name, _ in members] for group, members in GROUPS.items()}
    return {"groups": {**classes, "species": species},
            "gc_bins": "GC of the window's A/C/G/T bases, bins " + ", ".join(GC_CLASSES),
            "codon_classes_of": "coding bases only (codon_position and gene_strand)",
            "genomes": per_genome, "per_layer": per_layer}
