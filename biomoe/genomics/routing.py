"""Which experts the bases of each genome (and species) are routed to, and how genome-specific that is.

For every FASTA file (one genome, labelled like the data module labels files: the file name
without FASTA/gzip suffixes, see :func:`~biomoe.data.sources.fasta_paths.file_labels`) ``biomoe routing`` reads
``--windows`` windows of ``--seq_length`` bases, spread evenly over the genome's contigs (the same
windows on every run; windows with more than half non-ACGT bases are skipped and counted as
such), runs the model on ``<bos>`` + window as ``embed`` does, and counts, for every MoE block, how
many of the ``windows x seq_length x top_k`` top-k assignments of the window's bases went to each
expert. Dense blocks have no router and are left out.

The species of a genome is the part of its label before the first ``_`` (``ecoli_536`` ->
``ecoli``). The JSON output holds, per genome and MoE block, the fraction of assignments per
expert; the species and their mean fractions; and how genome-specific routing is: the mean
Jensen-Shannon divergence (bits, 0 = same distribution, 1 = disjoint experts) between the routing
distributions of two genomes of the same species and of two genomes of different species, per
block and averaged over blocks. If genomes of one species route alike and species differ, the
first is well below the second. The figure (:mod:`biomoe.genomics.routing_plot`) shows one
heatmap per MoE block; ``--from_json`` redraws it from a JSON file without the model.

With ``--features`` the hooks also count assignments per genomic class of the routed base (coding
or not, codon position, gene strand, window GC; :mod:`biomoe.genomics.routing_features`) and the
JSON gains a ``features`` section. Such a file is format ``biomoe-routing/2``; one without it is
still written as ``biomoe-routing/1``, so a reader of the first format keeps reading it, and
``--from_json`` reads both.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from biomoe.data.sources.reader import SequenceReader
from biomoe.data.tokenizer import NucleotideTokenizer
from biomoe.errors import GenomeInputError
from biomoe.genomics.routing_features import NUM_CELLS, GenomeFeatures, features_report
from biomoe.model.moe.router import RoutingResult, TopKRouter, expert_counts
from biomoe.model.transformer import MoETransformer

__all__ = ["FEATURES_FORMAT", "FORMAT", "MAX_AMBIGUOUS_FRACTION", "READABLE_FORMATS", "GenomeRouting",
           "RoutingCounter", "genome_routing", "jensen_shannon_bits", "read_report", "routing_report", "species_of",
           "specificity", "to_json", "window_starts"]

MAX_AMBIGUOUS_FRACTION = 0.5
"""A window with more non-ACGT bases than this ("mostly N": assembly gaps) is skipped."""
FORMAT = "biomoe-routing/1"
FEATURES_FORMAT = "biomoe-routing/2"
"""Format 1 plus the ``features`` section."""
READABLE_FORMATS = (FORMAT, FEATURES_FORMAT)


def species_of(label: str) -> str:
    """The species part of a genome label: everything before the first ``_``."""
    return label.split("_", 1)[0]


def window_starts(lengths: Sequence[int], seq_length: int, count: int) -> list[tuple[int, int]]:
    """``(contig index, start)`` of ``count`` windows of ``seq_length`` bases spread evenly over
    every possible window start of the contigs at least ``seq_length`` long (as if the contigs were
    laid end to end), each at the middle of its share; [] when no contig is long enough."""
    spans = np.array([max(int(n) - seq_length + 1, 0) for n in lengths], dtype=np.int64)
    total = int(spans.sum())
    if total == 0 or count <= 0:
        return []
    ends = np.cumsum(spans)
    offsets = ((np.arange(count) + 0.5) * (total / count)).astype(np.int64)
    contigs = np.searchsorted(ends, offsets, side="right")
    starts = offsets - (ends[contigs] - spans[contigs])
    return [(int(c), int(s)) for c, s in zip(contigs, starts)]


class RoutingCounter:
    """Counts every MoE block's top-k choices through forward hooks on its router.

    The hook reads the :class:`~biomoe.model.moe.router.RoutingResult` the router returns, so it
    counts what the dispatcher acts on, for the torch router and for any subclass of it (the
    Transformer Engine fused router included) alike; no router is swapped or re-run. The model
    reads ``<bos>`` + bases, so the first position of every row is dropped before counting: the
    router's choice at input position ``i`` >= 1 is the choice for base ``i - 1`` of the window.
    Given one cell per base (:mod:`biomoe.genomics.routing_features`), :meth:`run` also counts the
    assignments per (cell, expert) in :attr:`cell_counts`.
    """

    def __init__(self, model: MoETransformer) -> None:
        self.layers = [i for i, block in enumerate(model.blocks) if isinstance(getattr(block.mlp, "router", None),
                                                                               TopKRouter)]
        if not self.layers:
            raise GenomeInputError(None, "the model has no MoE layer (model.config.moe_layers is empty): "
                                         "there is no routing to count")
        self.routers = {i: model.blocks[i].mlp.router for i in self.layers}
        self.num_experts = model.config.num_experts
        self.top_k = model.config.top_k
        self.row_length: int | None = None
        self.cells: Tensor | None = None  # [rows, bases] cell of every base of the batch being run
        self.counts: dict[int, Tensor] = {}
        self.cell_counts: dict[int, Tensor] = {}
        self.reset()

    def reset(self) -> None:
        self.counts = {i: torch.zeros(self.num_experts, dtype=torch.int64) for i in self.layers}
        self.cell_counts = {i: torch.zeros(NUM_CELLS, self.num_experts, dtype=torch.int64) for i in self.layers}

    def _hook(self, layer: int):
        def count(module: TopKRouter, inputs: tuple[Tensor, ...], routing: RoutingResult) -> None:
            indices = routing.expert_indices
            if self.row_length is not None:  # [rows * positions, k] -> the base positions only
                indices = indices.reshape(-1, self.row_length, indices.shape[-1])[:, 1:]
            self.counts[layer] += expert_counts(indices, self.num_experts).cpu()
            if self.cells is not None:  # one (cell, expert) pair per assignment, counted in one scatter-add
                pairs = self.cells[:, :, None] * self.num_experts + indices.long()
                self.cell_counts[layer] += expert_counts(pairs, NUM_CELLS * self.num_experts).cpu().reshape(
                    NUM_CELLS, self.num_experts)
        return count

    @contextmanager
    def attached(self) -> Iterator[RoutingCounter]:
        handles = [router.register_forward_hook(self._hook(i)) for i, router in self.routers.items()]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()

    @torch.no_grad()
    def run(self, model: MoETransformer, input_ids: Tensor, cells: Tensor | None = None) -> None:
        """One forward pass over ``input_ids`` [rows, 1 + bases] (``<bos>`` first) while counting;
        ``cells`` [rows, bases], if given, is the cell of every base (not of ``<bos>``)."""
        if cells is not None and tuple(cells.shape) != (input_ids.shape[0], input_ids.shape[1] - 1):
            raise ValueError(f"cells {tuple(cells.shape)} do not match the bases of input_ids "
                             f"{tuple(input_ids.shape)} (<bos> first)")
        self.row_length = int(input_ids.shape[1])
        self.cells = None if cells is None else cells.to(input_ids.device)
        try:
            with self.attached():
                model(input_ids, return_logits=False)
        finally:
            self.row_length = None
            self.cells = None


@dataclass
class GenomeRouting:
    """One genome's routing: windows counted and skipped, assignments per expert per MoE block."""

    label: str
    path: str
    windows: int
    skipped_windows: int
    counts: dict[int, list[int]]
    features: dict[str, Any] | None = None
    """With gene calls: their summary and "cells", per block the counts [cell][expert]."""


@torch.no_grad()
def genome_routing(model: MoETransformer, counter: RoutingCounter, genome: SequenceReader, label: str, windows: int,
                   seq_length: int, batch_size: int, progress=None,
                   features: GenomeFeatures | None = None) -> GenomeRouting:
    """Routing counts of one genome over its evenly spread windows (see :func:`window_starts`);
    with ``features`` (its gene calls), the counts per (cell, expert) too."""
    tokenizer = NucleotideTokenizer()
    device = next(model.parameters()).device
    starts = window_starts([c.length for c in genome.contigs], seq_length, windows)
    if not starts:
        raise GenomeInputError(genome.paths[0], f"no contig has {seq_length:,} bases (the longest has "
                                                f"{max((c.length for c in genome.contigs), default=0):,}); "
                                                "lower --seq_length")
    counter.reset()
    used = skipped = 0
    for first in range(0, len(starts), batch_size):
        rows, cells = [], []
        for contig, start in starts[first:first + batch_size]:
            bases = genome.fetch(contig, start, start + seq_length)
            ids = tokenizer.encode(bases, add_bos=True)
            if 1.0 - NucleotideTokenizer.unambiguous_mask(ids[1:]).mean() > MAX_AMBIGUOUS_FRACTION:
                skipped += 1
            else:
                rows.append(ids)
                if features is not None:
                    cells.append(features.window_cells(contig, start, bases))
        if rows:
            counter.run(model, torch.from_numpy(np.stack(rows)).to(device),
                        torch.from_numpy(np.stack(cells)) if features is not None else None)
            used += len(rows)
        if progress is not None:
            progress.update(seq_length * len(starts[first:first + batch_size]))
    if used == 0:
        raise GenomeInputError(genome.paths[0], f"all {len(starts)} windows are mostly N (more than "
                                                f"{MAX_AMBIGUOUS_FRACTION:.0%} non-ACGT bases)")
    summary = None
    if features is not None:
        summary = {**features.summary(), "cells": {layer: counts.tolist()
                                                   for layer, counts in counter.cell_counts.items()}}
    return GenomeRouting(label, str(genome.paths[0]), used, skipped,
                         {layer: [int(v) for v in counts] for layer, counts in counter.counts.items()}, summary)


# ------------------------------------------------------------------------------------- summary
def jensen_shannon_bits(p: Sequence[float], q: Sequence[float]) -> float:
    """Jensen-Shannon divergence of two distributions in bits (0 = equal, 1 = disjoint supports)."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    m = 0.5 * (p + q)

    def kl(a: np.ndarray) -> float:
        nonzero = a > 0
        return float(np.sum(a[nonzero] * np.log2(a[nonzero] / m[nonzero])))

    return max(0.5 * kl(p) + 0.5 * kl(q), 0.0)


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def specificity(fractions: dict[str, dict[str, list[float]]], species: dict[str, str],
                layers: list[str]) -> dict[str, Any]:
    """Mean JSD (bits) between genome pairs of the same species and of different species, per block
    and averaged over the blocks (None where there is no such pair)."""
    per_layer: dict[str, dict[str, Any]] = {}
    for layer in layers:
        within: list[float] = []
        between: list[float] = []
        for a, b in itertools.combinations(fractions, 2):
            value = jensen_shannon_bits(fractions[a][layer], fractions[b][layer])
            (within if species[a] == species[b] else between).append(value)
        per_layer[layer] = {"within_species_jsd_bits": _mean(within), "between_species_jsd_bits": _mean(between),
                            "within_species_pairs": len(within), "between_species_pairs": len(between)}
    means = {key: _mean([v[key] for v in per_layer.values() if v[key] is not None])
             for key in ("within_species_jsd_bits", "between_species_jsd_bits")}
    return {"per_layer": per_layer, **{f"mean_{k}": v for k, v in means.items()}}


def routing_report(results: list[GenomeRouting], layers: list[int], num_experts: int, top_k: int,
                   seq_length: int, windows: int, checkpoint: str, command: str) -> dict[str, Any]:
    """Everything the JSON output holds (block indices as string keys, experts as list positions);
    the ``features`` section when every result has gene calls."""
    keys = [str(layer) for layer in layers]
    genomes: dict[str, dict[str, Any]] = {}
    for result in results:
        fractions = {}
        for layer in layers:
            counts = np.asarray(result.counts[layer], dtype=np.float64)
            fractions[str(layer)] = (counts / counts.sum()).tolist()
        genomes[result.label] = {"species": species_of(result.label), "path": result.path,
                                 "windows": result.windows, "skipped_windows": result.skipped_windows,
                                 "assignments": result.windows * seq_length * top_k,
                                 "counts": {str(layer): result.counts[layer] for layer in layers},
                                 "fractions": fractions}
    species: dict[str, list[str]] = {}
    for label, entry in genomes.items():
        species.setdefault(entry["species"], []).append(label)
    species_means = {name: {key: np.mean([genomes[g]["fractions"][key] for g in members], axis=0).tolist()
                            for key in keys} for name, members in species.items()}
    with_features = bool(results) and all(r.features is not None for r in results)
    report = {"format": FEATURES_FORMAT if with_features else FORMAT, "command": command, "checkpoint": checkpoint,
              "seq_length": seq_length, "windows_requested": windows, "num_experts": num_experts, "top_k": top_k,
              "moe_layers": layers, "genomes": genomes, "species": species, "species_mean_fractions": species_means,
              "specificity": specificity({g: e["fractions"] for g, e in genomes.items()},
                                         {g: e["species"] for g, e in genomes.items()}, keys)}
    if with_features:
        report["features"] = features_report(
            {r.label: {"species": genomes[r.label]["species"], "counts": genomes[r.label]["counts"],
                       "features": {**r.features, "cells": {str(k): v for k, v in r.features["cells"].items()}}}
             for r in results}, layers)
    return report


def to_json(report: dict[str, Any]) -> str:
    """Indented JSON with every list of numbers on one line (a genome's fractions read as a row)."""
    text = json.dumps(report, indent=1)
    return _NUMBER_LIST.sub(lambda m: "[" + " ".join(m.group(1).split()) + "]", text) + "\n"


_NUMBER_LIST = re.compile(r"\[\s+((?:[-+0-9.eE,\s]|null)+?)\s+\]")  # null: an undefined ratio


def read_report(path: Path) -> dict[str, Any]:
    """A JSON file this command wrote, checked enough to draw it (one line if it is something else)."""
    try:
        report = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise GenomeInputError(path, "no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GenomeInputError(path, f"cannot read as JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(report, dict) or report.get("format") not in READABLE_FORMATS:
        raise GenomeInputError(path, "is not a routing result written by 'biomoe routing'")
    return report
