"""Protein-coding genes called with Prodigal (through pyrodigal), and per-base views of them.

A zero-shot mutation benchmark needs to know which bases code for protein, on which strand and at
which codon position; later analyses (which experts fire on coding bases) need the same per-base
facts. Prodigal trains its gene model on the genome itself, which needs at least 20 kb of
sequence; shorter or unknown genomes are called in *meta* mode with Prodigal's pre-trained
profiles. Both modes are deterministic: the same sequence always gives the same genes.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from biomoe.errors import GenomeInputError

__all__ = ["Gene", "MIN_TRAINING_BASES", "call_genes", "call_genes_in_contigs", "codon_position",
           "coding_mask", "coding_strand"]

MIN_TRAINING_BASES = 20_000
"""Prodigal refuses to train on less sequence than this; below it genes are called in meta mode."""


@dataclass(frozen=True)
class Gene:
    """One predicted gene. ``start``/``end`` are 0-based, half-open on the forward strand whatever
    the gene's strand, so ``sequence[start:end]`` is the gene (reverse-complement it for ``-1``)."""

    contig: str
    start: int
    end: int
    strand: int  # +1 or -1
    partial: bool = False  # runs off a contig end: its first or last codon is not a real start/stop
    start_codon: str = "ATG"
    table: int = 11

    @property
    def length(self) -> int:
        return self.end - self.start

    def label(self) -> str:
        return f"{self.contig}:{self.start + 1}-{self.end}({'+' if self.strand > 0 else '-'})"


def _import_pyrodigal():
    try:
        import pyrodigal
    except ImportError:
        raise GenomeInputError("genes", "calling genes needs pyrodigal: pip install pyrodigal") from None
    return pyrodigal


def call_genes_in_contigs(contigs: Mapping[str, str], table: int = 11, meta: bool | None = None) -> list[Gene]:
    """Genes of every contig (name -> bases). One gene model is trained on all contigs together
    when they hold at least :data:`MIN_TRAINING_BASES` bases (single mode, Prodigal's best for a
    whole genome), else meta mode; ``meta`` forces either."""
    pyrodigal = _import_pyrodigal()
    encoded = {name: seq.upper().encode("ascii", "replace") for name, seq in contigs.items()}
    total = sum(len(s) for s in encoded.values())
    use_meta = total < MIN_TRAINING_BASES if meta is None else meta
    if use_meta:
        finder = pyrodigal.GeneFinder(meta=True, mask=True)
    else:
        finder = pyrodigal.GeneFinder(meta=False, mask=True)
        try:
            with warnings.catch_warnings():  # Prodigal prefers 100 kb but trains well from 20 kb
                warnings.simplefilter("ignore", UserWarning)
                finder.train(*encoded.values(), translation_table=table)
        except ValueError as exc:  # e.g. an unknown translation table
            raise GenomeInputError("genes", f"Prodigal cannot train a gene model: {exc}") from None
    genes: list[Gene] = []
    for name, seq in encoded.items():
        if not seq:
            continue
        for gene in finder.find_genes(seq):
            genes.append(Gene(contig=name, start=gene.begin - 1, end=gene.end, strand=int(gene.strand),
                              partial=bool(gene.partial_begin or gene.partial_end),
                              start_codon=str(gene.start_type), table=int(gene.translation_table)))
    return genes


def call_genes(sequence: str, contig: str = "contig", table: int = 11, meta: bool | None = None) -> list[Gene]:
    """Genes of one sequence (see :func:`call_genes_in_contigs`)."""
    return call_genes_in_contigs({contig: sequence}, table=table, meta=meta)


def _genes_on(genes: Sequence[Gene], contig: str | None) -> list[Gene]:
    return [g for g in genes if contig is None or g.contig == contig]


def coding_mask(genes: Sequence[Gene], length: int, contig: str | None = None) -> np.ndarray:
    """Boolean per base of a contig of ``length`` bases: inside any gene on either strand."""
    mask = np.zeros(length, dtype=bool)
    for gene in _genes_on(genes, contig):
        mask[max(gene.start, 0):min(gene.end, length)] = True
    return mask


def coding_strand(genes: Sequence[Gene], length: int, contig: str | None = None) -> np.ndarray:
    """int8 per base: +1 / -1 for the strand of the gene covering it, 0 outside genes (where genes
    on opposite strands overlap, the later gene in ``genes`` wins)."""
    strand = np.zeros(length, dtype=np.int8)
    for gene in _genes_on(genes, contig):
        strand[max(gene.start, 0):min(gene.end, length)] = gene.strand
    return strand


def codon_position(genes: Sequence[Gene], length: int, contig: str | None = None) -> np.ndarray:
    """int8 per base: 1, 2 or 3 for its position in its gene's codon (read on the gene's own
    strand, so a minus-strand gene's first codon base is its highest coordinate), 0 outside genes."""
    position = np.zeros(length, dtype=np.int8)
    for gene in _genes_on(genes, contig):
        offsets = np.arange(gene.length)
        coords = gene.start + offsets if gene.strand > 0 else gene.end - 1 - offsets
        keep = (coords >= 0) & (coords < length)
        position[coords[keep]] = (offsets[keep] % 3 + 1).astype(np.int8)
    return position
