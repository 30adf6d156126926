"""``biomoe routing``: which experts the bases of each genome (and species) are routed to.

For every FASTA file (one genome, labelled like the data module labels files: the file name
without FASTA/gzip suffixes, see :func:`~biomoe.data.fasta.file_labels`) the command reads
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
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shlex
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from biomoe.cli.arguments import CommandParser
from biomoe.data.fasta import Genome, file_labels, resolve_fasta_paths
from biomoe.data.tokenizer import NucleotideTokenizer
from biomoe.errors import GenomeInputError
from biomoe.model.moe.router import RoutingResult, TopKRouter, expert_counts
from biomoe.model.transformer import MoETransformer

__all__ = ["MAX_AMBIGUOUS_FRACTION", "GenomeRouting", "RoutingCounter", "genome_routing", "jensen_shannon_bits",
           "main", "read_report", "routing_report", "species_of", "specificity", "to_json", "window_starts"]

MAX_AMBIGUOUS_FRACTION = 0.5
"""A window with more non-ACGT bases than this ("mostly N": assembly gaps) is skipped."""
FORMAT = "biomoe-routing/1"


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
    reads ``<bos>`` + bases, so the first position of every row is dropped before counting.
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
        self.counts: dict[int, Tensor] = {}
        self.reset()

    def reset(self) -> None:
        self.counts = {i: torch.zeros(self.num_experts, dtype=torch.int64) for i in self.layers}

    def _hook(self, layer: int):
        def count(module: TopKRouter, inputs: tuple[Tensor, ...], routing: RoutingResult) -> None:
            indices = routing.expert_indices
            if self.row_length is not None:  # [rows * positions, k] -> the base positions only
                indices = indices.reshape(-1, self.row_length, indices.shape[-1])[:, 1:]
            self.counts[layer] += expert_counts(indices, self.num_experts).cpu()
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
    def run(self, model: MoETransformer, input_ids: Tensor) -> None:
        """One forward pass over ``input_ids`` [rows, 1 + bases] (``<bos>`` first) while counting."""
        self.row_length = int(input_ids.shape[1])
        try:
            with self.attached():
                model(input_ids, return_logits=False)
        finally:
            self.row_length = None


@dataclass
class GenomeRouting:
    """One genome's routing: windows counted and skipped, assignments per expert per MoE block."""

    label: str
    path: str
    windows: int
    skipped_windows: int
    counts: dict[int, list[int]]


@torch.no_grad()
def genome_routing(model: MoETransformer, counter: RoutingCounter, genome: Genome, label: str, windows: int,
                   seq_length: int, batch_size: int, progress=None) -> GenomeRouting:
    """Routing counts of one genome over its evenly spread windows (see :func:`window_starts`)."""
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
        rows = []
        for contig, start in starts[first:first + batch_size]:
            ids = tokenizer.encode(genome.fetch(contig, start, start + seq_length), add_bos=True)
            if 1.0 - NucleotideTokenizer.unambiguous_mask(ids[1:]).mean() > MAX_AMBIGUOUS_FRACTION:
                skipped += 1
            else:
                rows.append(ids)
        if rows:
            counter.run(model, torch.from_numpy(np.stack(rows)).to(device))
            used += len(rows)
        if progress is not None:
            progress.update(seq_length * len(starts[first:first + batch_size]))
    if used == 0:
        raise GenomeInputError(genome.paths[0], f"all {len(starts)} windows are mostly N (more than "
                                                f"{MAX_AMBIGUOUS_FRACTION:.0%} non-ACGT bases)")
    return GenomeRouting(label, str(genome.paths[0]), used, skipped,
                         {layer: [int(v) for v in counts] for layer, counts in counter.counts.items()})


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
    """Everything the JSON output holds (block indices as string keys, experts as list positions)."""
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
    return {"format": FORMAT, "command": command, "checkpoint": checkpoint, "seq_length": seq_length,
            "windows_requested": windows, "num_experts": num_experts, "top_k": top_k, "moe_layers": layers,
            "genomes": genomes, "species": species, "species_mean_fractions": species_means,
            "specificity": specificity({g: e["fractions"] for g, e in genomes.items()},
                                       {g: e["species"] for g, e in genomes.items()}, keys)}


def to_json(report: dict[str, Any]) -> str:
    """Indented JSON with every list of numbers on one line (a genome's fractions read as a row)."""
    text = json.dumps(report, indent=1)
    return _NUMBER_LIST.sub(lambda m: "[" + " ".join(m.group(1).split()) + "]", text) + "\n"


_NUMBER_LIST = re.compile(r"\[\s+([-+0-9.eE,\s]+?)\s+\]")


def read_report(path: Path) -> dict[str, Any]:
    """A JSON file this command wrote, checked enough to draw it (one line if it is something else)."""
    try:
        report = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise GenomeInputError(path, "no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GenomeInputError(path, f"cannot read as JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(report, dict) or report.get("format") != FORMAT:
        raise GenomeInputError(path, "is not a routing result written by 'biomoe routing'")
    return report


# --------------------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    from biomoe.genomics.score_fasta import positive_int

    parser = CommandParser(prog="biomoe routing", description=__doc__.splitlines()[0],
                     epilog="Species: the part of a genome's label (its file name without FASTA/gzip suffixes) "
                            "before the first '_': ecoli_536.fna.gz and ecoli_k12.fa are species 'ecoli'. "
                            "Fractions, species means and the JSD summary are described in the module "
                            "biomoe.genomics.routing.")
    parser.add_argument("--ckpt_path", "--ckpt-path", help="checkpoint, or a run folder (its best checkpoint)")
    parser.add_argument("--fasta", nargs="+",
                        help="FASTA files (or folders of them), one genome each; the species of a genome is its "
                             "label (file name without FASTA/gzip suffixes) up to the first '_', e.g. "
                             "ecoli_536.fna.gz -> ecoli")
    parser.add_argument("--windows", type=positive_int, default=64,
                        help="windows per genome, spread evenly over its contigs (default %(default)s)")
    parser.add_argument("--seq_length", "--seq-length", type=positive_int, default=None,
                        help="bases per window (default: the checkpoint's training seq_length, else 1024)")
    parser.add_argument("--batch_size", "--batch-size", type=positive_int, default=16,
                        help="windows per forward pass (default %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("routing.json"),
                        help="output JSON, written atomically (default %(default)s)")
    parser.add_argument("--plot", type=Path, default=None,
                        help="heatmap PNG, one panel per MoE layer (default: --out with .png)")
    parser.add_argument("--no_plot", "--no-plot", action="store_true", help="write the JSON only")
    parser.add_argument("--from_json", "--from-json", type=Path, default=None,
                        help="draw --plot from a JSON this command wrote, without the model")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: cuda where available (default %(default)s)")
    parser.add_argument("--no_progress", "--no-progress", action="store_true", help="no progress bar on stderr")
    return parser


def _device(choice: str) -> str:
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        raise GenomeInputError(None, "--device cuda: no CUDA device is available (use --device cpu)")
    return choice


def _replot(args: argparse.Namespace) -> int:
    from biomoe.files import check_outputs
    from biomoe.genomics.routing_plot import plot_routing, require_matplotlib

    if args.ckpt_path or args.fasta:
        raise GenomeInputError(None, "--from_json draws an existing result: leave out --ckpt_path and --fasta")
    if args.plot is None:
        raise GenomeInputError(None, "--from_json needs --plot, the PNG to write")
    require_matplotlib()
    check_outputs([args.plot], [args.from_json])
    plot_routing(read_report(args.from_json), args.plot)
    print(f"wrote {args.plot}")
    return 0


def main(argv: list[str]) -> int:
    from biomoe.files import check_outputs, write_text
    from biomoe.checkpoint.run_folder import resolve_checkpoint
    from biomoe.inference.scoring import check_checkpoint_file, load_model
    from biomoe.checkpoint.records import training_seq_length
    from biomoe.progress import progress_bar

    args = build_parser().parse_args(argv)
    if args.from_json is not None:
        return _replot(args)
    if not args.ckpt_path or not args.fasta:
        raise GenomeInputError(None, "routing needs --ckpt_path and --fasta (or --from_json to redraw a result)")
    plot = None if args.no_plot else (args.plot or args.out.with_suffix(".png"))
    ckpt = resolve_checkpoint(args.ckpt_path)  # a run folder -> its best checkpoint
    check_checkpoint_file(ckpt)
    paths = resolve_fasta_paths(args.fasta)  # folders -> their FASTA files
    labels = file_labels(paths)
    genomes = [Genome(path) for path in paths]  # validates every file before any work
    if plot is not None:
        from biomoe.genomics.routing_plot import require_matplotlib

        require_matplotlib()
    check_outputs([args.out, plot], [ckpt, *paths])
    device = _device(args.device)
    # load_model builds the plain torch router (the TE router needs a GPU and gives the same
    # choices); the hooks would count a TE router's choices just the same.
    model = load_model(ckpt).to(device)
    counter = RoutingCounter(model)
    seq_length = args.seq_length or training_seq_length(ckpt) or 1024
    results = []
    with progress_bar(len(genomes) * args.windows * seq_length, "routing", disable=args.no_progress) as bar:
        for genome, label in zip(genomes, labels):
            results.append(genome_routing(model, counter, genome, label, args.windows, seq_length,
                                          args.batch_size, progress=bar))
    report = routing_report(results, counter.layers, counter.num_experts, counter.top_k, seq_length, args.windows,
                            str(ckpt), shlex.join(["biomoe", "routing", *argv]))
    write_text(args.out, to_json(report))
    print(f"wrote {args.out} ({len(results)} genomes, {len(report['species'])} species, "
          f"{len(counter.layers)} MoE layers)")
    summary = report["specificity"]
    within, between = summary["mean_within_species_jsd_bits"], summary["mean_between_species_jsd_bits"]
    if within is not None or between is not None:
        shown = lambda v: "n/a" if v is None else f"{v:.4f}"  # noqa: E731
        print(f"mean JSD between routing distributions: within species {shown(within)} bits, "
              f"between species {shown(between)} bits")
    skipped = sum(r.skipped_windows for r in results)
    if skipped:
        print(f"biomoe: skipped {skipped} mostly-N windows (counted in each genome's skipped_windows)",
              file=sys.stderr)
    if plot is not None:
        from biomoe.genomics.routing_plot import plot_routing

        plot_routing(report, plot)
        print(f"wrote {plot}")
    return 0
