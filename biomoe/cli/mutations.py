"""``biomoe mutations``: zero-shot mutation benchmark on the genes of each genome.

Calls genes with Prodigal, samples codons in them, classes every SNV of a sampled codon as
synonymous, missense or stop-gain and scores each with the model's log-likelihood ratio and with an
order-k Markov chain fitted on the same genome (which favours the baseline: it has seen every
reference k-mer). Reports, per genome, the AUROC of ``-llr`` for stop-gain vs synonymous and
missense vs synonymous (:mod:`biomoe.inference.mutations`).

Writes into ``--out`` (a folder): ``mutations.tsv`` (one row per SNV), ``summary.json``,
``summary.md`` (the AUROC table) and ``roc.png`` (ROC curves, model against Markov; needs
matplotlib), all committed together. docs/mutations.md says how to read them.

On a CPU the defaults are sized to finish in about a minute for a model of the ``genome`` recipe's
size (:data:`CPU_CODONS` codons and windows of at most :data:`CPU_WINDOW` bases, instead of
:data:`GPU_CODONS` and the training length), and the time the whole run will take is estimated
from its first SNVs before the rest are scored.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from biomoe.cli.arguments import (CommandParser, add_batch_tokens_option, add_checkpoint_argument, add_device_option,
                                  add_progress_option, add_runtime_options, checkpoint_of, model_from_args,
                                  positive_int)
from biomoe.errors import GenomeInputError

__all__ = ["main", "OUTPUT_NAMES"]

OUTPUT_NAMES = ("mutations.tsv", "summary.json", "summary.md", "roc.png")
GPU_CODONS = 2000
CPU_CODONS = 100
CPU_WINDOW = 256
"""CPU defaults (``--codons``, ``--window``): a CPU scores a model of the ``genome`` recipe's size
(fp32) at a rate set by tokens, not by the window, so a short window and a small sample keep a
default run to minutes. A codon's nine SNVs share one reference window and each continues it from
the codon on (a fraction of a window per SNV); the command reports its own SNVs/s and, on a CPU,
how long the whole run will take after its first SNVs. A window of 256 still gives every variant
128 bases on each side."""
FIRST_SNVS = 64
"""SNVs scored before the others on a CPU, to time them and say how long the whole run takes."""
AUROC_LEGEND = ("AUROC: the chance that a damaging SNV (stop-gain, missense) gets a lower log-likelihood ratio "
                "than a synonymous one, i.e. that the scorer finds it less likely. 0.5 = chance; higher = the "
                "scorer ranks the damaging class as worse; below 0.5 = it ranks them the wrong way round.")
COLUMNS = ["genome", "contig", "pos", "ref", "alt", "gene", "strand", "codon_position", "codon", "class",
           "model_llr", "markov_llr"]


def _parser() -> CommandParser:
    parser = CommandParser(prog="biomoe mutations", description=__doc__.splitlines()[0])
    add_checkpoint_argument(parser, inputs="fasta")
    parser.add_argument("fasta", nargs="*", help="genome FASTA file(s); each file is one genome")
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    parser.add_argument("--codons", type=positive_int, default=None,
                        help=f"codons sampled per genome, 9 SNVs each (default {GPU_CODONS} on a GPU, "
                             f"{CPU_CODONS} on a CPU, where each SNV is slow to score)")
    parser.add_argument("--table", type=int, default=11, help="NCBI translation table (default 11)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the codon sample")
    parser.add_argument("--markov-order", type=int, default=6, help="order of the Markov baseline (default 6)")
    parser.add_argument("--window", type=positive_int, default=None,
                        help="bases per scoring window (default: the checkpoint's training seq_length, else 1024; "
                             f"on a CPU at most {CPU_WINDOW})")
    add_batch_tokens_option(parser)
    add_device_option(parser)
    add_runtime_options(parser)
    add_progress_option(parser)
    return parser


def _genome_contigs(genome) -> dict[int, dict[str, str]]:
    """file index -> {contig name: bases} (upper case) of every file of the reader."""
    out: dict[int, dict[str, str]] = {}
    for contig in genome.contigs:
        out.setdefault(contig.file_index, {})[contig.name] = genome.fetch(contig.name, 0, contig.length).upper()
    return out


def _note(text: str) -> None:
    print(f"mutations: {text}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    parser = _parser()
    args = checkpoint_of(parser.parse_args(argv), parser)
    # imported after parsing: --help stays fast
    import numpy as np

    from biomoe.cli.windows import scoring_window
    from biomoe.data.sources.registry import open_reader
    from biomoe.output_checks import check_outputs
    from biomoe.genomics.markov import MAX_ORDER
    from biomoe.inference import mutations as engine
    from biomoe.inference.score_variants import Variant, check_variants
    from biomoe.progress import FirstBatchClock, progress_bar
    from torch import device as torch_device

    if not 0 <= args.markov_order <= MAX_ORDER:
        parser.error(f"--markov-order must be in 0..{MAX_ORDER}")
    code = engine.codon_table(args.table)
    on_cpu = torch_device(args.device).type == "cpu"
    if args.codons is None:
        args.codons = CPU_CODONS if on_cpu else GPU_CODONS
    outputs = [args.out / name for name in OUTPUT_NAMES]
    check_outputs(outputs, [args.ckpt, *args.fasta])
    genome = open_reader(args.fasta)
    window = scoring_window(args.window, args.ckpt)  # checked against the training length
    if args.window is None and on_cpu and window > CPU_WINDOW:
        window = CPU_WINDOW
        _note(f"on the CPU: windows of {CPU_WINDOW} bases, for speed (--window sets another)")
    # Each genome's genes, codons, SNVs and Markov baseline are found on the host while the model
    # loads (Prodigal releases the GIL): on a GPU machine that hides most of the host's part.
    contigs_of = _genome_contigs(genome)
    with ThreadPoolExecutor(max_workers=max(1, min(len(contigs_of), os.cpu_count() or 1))) as pool:
        futures = {genome.labels[index]: pool.submit(_prepare_genome, genome.paths[index], contigs, args, code)
                   for index, contigs in contigs_of.items()}
        try:
            model = model_from_args(args)
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise
        snvs_of: dict[str, list] = {}
        markov_of: dict[str, np.ndarray] = {}
        for label, future in futures.items():
            snvs_of[label], markov_of[label], note = future.result()
            _note(f"{label}: {note}")
    all_snvs = [(label, snv) for label, snvs in snvs_of.items() for snv in snvs]
    variants = [Variant(s.contig, s.position, s.ref, s.alt) for _, s in all_snvs]
    # one window per codon, centred on its middle base: the codon's nine SNVs share its reference pass
    variants, prepared, _ = check_variants(genome, variants, window, source="mutations",
                                           centres=[s.codon_middle for _, s in all_snvs])
    with progress_bar(len(variants), "mutations", unit="variant", disable=args.no_progress) as bar, \
            FirstBatchClock(bar) as clock:
        rows = _score(model, variants, prepared, clock, args.batch_tokens, estimate=on_cpu)
    _note(clock.report("the model scored", len(rows), "SNVs", lambda work, _, seconds: f"{work / seconds:,.0f} SNVs/s"))
    model_llr = np.array([row["llr"] for row in rows], dtype=np.float64)
    summary, cursor = {"window": window, "table": args.table, "codons": args.codons, "seed": args.seed,
                       "markov_order": args.markov_order, "markov_fit": "whole genome, both strands",
                       "genomes": {}}, 0
    for label, snvs in snvs_of.items():
        own = model_llr[cursor:cursor + len(snvs)]
        cursor += len(snvs)
        classes = [s.klass for s in snvs]
        summary["genomes"][label] = engine.summarise(classes, {"model": own, "markov": markov_of[label]})
    _write_outputs(args.out, all_snvs, model_llr, np.concatenate(list(markov_of.values())), summary)
    print(_markdown(summary), end="")
    print(AUROC_LEGEND)
    print(f"wrote {args.out}/ ({', '.join(OUTPUT_NAMES)})")
    return 0


def _prepare_genome(path, contigs: dict[str, str], args, code) -> tuple[list, object, str]:
    """One genome's sampled SNVs, their Markov log-likelihood ratios and a line saying what was found."""
    from biomoe.data.tokenizer import NucleotideTokenizer
    from biomoe.genomics.genes import call_genes_in_contigs
    from biomoe.genomics.markov import MarkovModel
    from biomoe.inference import mutations as engine

    started = time.perf_counter()
    genes = call_genes_in_contigs(contigs, table=args.table)
    codons = engine.sample_codons(contigs, genes, args.codons, args.seed, code)
    if not codons:
        raise GenomeInputError(path, f"no complete protein-coding genes found ({len(genes)} called, none with a "
                                     "codon to mutate)")
    snvs = engine.enumerate_snvs(contigs, codons, code)
    markov = MarkovModel.fit((NucleotideTokenizer().encode(s) for s in contigs.values()), args.markov_order)
    return snvs, engine.markov_llrs(markov, contigs, snvs), (
        f"{len(genes):,} genes, {len(codons):,} codons, {len(snvs):,} SNVs ({time.perf_counter() - started:.1f} s)")


def _score(model, variants: list, prepared: list, bar, batch_tokens: int | None, estimate: bool) -> list[dict]:
    """The model's rows for every SNV. With ``estimate`` the first :data:`FIRST_SNVS` are scored
    alone (they pay the warm-up: on a CPU the first forward pass costs seconds), then the next
    :data:`FIRST_SNVS` are timed, and the time the whole run will take, from their rate, is said
    before the rest are scored. An estimate from the first SNVs alone was off by the warm-up."""
    from biomoe.inference.score_variants import score_windows

    if not estimate or len(variants) <= 3 * FIRST_SNVS:
        return score_windows(model, variants, prepared, progress=bar, batch_tokens=batch_tokens)
    started = time.perf_counter()
    rows = score_windows(model, variants[:FIRST_SNVS], prepared[:FIRST_SNVS], progress=bar,
                         batch_tokens=batch_tokens)
    warm = time.perf_counter()
    second = slice(FIRST_SNVS, 2 * FIRST_SNVS)
    rows += score_windows(model, variants[second], prepared[second], progress=bar, batch_tokens=batch_tokens)
    now = time.perf_counter()
    each = (now - warm) / FIRST_SNVS
    total = now - started + each * (len(variants) - 2 * FIRST_SNVS)
    _note(f"on the CPU: about {_duration(total)} for {len(variants):,} SNVs (SNVs {FIRST_SNVS + 1}-{2 * FIRST_SNVS} "
          f"took {now - warm:.1f} s; the first {FIRST_SNVS}, with the warm-up, {warm - started:.1f} s); --codons, or a "
          "GPU, makes it quicker")
    return rows + score_windows(model, variants[2 * FIRST_SNVS:], prepared[2 * FIRST_SNVS:], progress=bar,
                                batch_tokens=batch_tokens)


def _duration(seconds: float) -> str:
    """``40 s``, ``3.5 min``, ``1.2 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _markdown(summary: dict) -> str:
    """The AUROC table: one row per genome and scorer."""
    lines = ["| genome | scorer | stop-gain vs syn. | missense vs syn. | SNVs (syn./mis./stop) |",
             "| --- | --- | --- | --- | --- |"]

    def cell(value):
        return "n/a" if value is None else f"{value:.3f}"

    for label, result in summary["genomes"].items():
        counts = result["counts"]
        n = f"{counts['synonymous']}/{counts['missense']}/{counts['stop_gain']}"
        for scorer in ("model", "markov"):
            au = result[scorer]["auroc"]
            name = scorer if scorer == "model" else f"Markov k={summary['markov_order']}"
            lines.append(f"| {label} | {name} | {cell(au['stop_gain_vs_synonymous'])} | "
                         f"{cell(au['missense_vs_synonymous'])} | {n} |")
    return "\n".join(lines) + "\n"


def _summary_markdown(summary: dict) -> str:
    """summary.md: the table and how to read it."""
    return _markdown(summary) + "\n" + AUROC_LEGEND + "\n"


def _write_outputs(folder: Path, snvs: list, model_llr, markov_llr, summary: dict) -> None:
    """All four files commit together: a reader never finds a table beside another run's summary."""
    from biomoe.output_set import commit_together

    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / name for name in OUTPUT_NAMES]
    with commit_together(paths) as outputs:
        with open(outputs.temp(paths[0]), "w") as handle:
            handle.write("\t".join(COLUMNS) + "\n")
            for (label, s), m, k in zip(snvs, model_llr, markov_llr):
                cells = [label, s.contig, s.position, s.ref, s.alt, s.gene, "+" if s.strand > 0 else "-",
                         s.codon_position, s.codon, s.klass, f"{m:.6f}", f"{k:.6f}"]
                handle.write("\t".join(str(c) for c in cells) + "\n")
        outputs.temp(paths[1]).write_text(json.dumps(summary, indent=2) + "\n")
        outputs.temp(paths[2]).write_text(_summary_markdown(summary))
        if not _plot(outputs.temp(paths[3]), snvs, model_llr, markov_llr, summary):
            outputs.drop(paths[3])


def _plot(path: Path, snvs: list, model_llr, markov_llr, summary: dict) -> bool:
    """ROC curves, one panel per class pair, model and Markov for every genome; False without
    matplotlib (the numbers are all in the other files)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _note("matplotlib is not installed: no roc.png (pip install 'biomoe[plot]')")
        return False
    import numpy as np
    import torch
    from biomoe.inference.roc import binary_roc  # not torchmetrics: it imports transformers (seconds)

    from biomoe.inference.mutations import PAIRS

    labels = np.array([label for label, _ in snvs])
    classes = np.array([s.klass for _, s in snvs])
    fig, axes = plt.subplots(1, len(PAIRS), figsize=(5 * len(PAIRS), 4.5))
    for ax, (positive, negative) in zip(np.atleast_1d(axes), PAIRS):
        for genome in summary["genomes"]:
            pick = (labels == genome) & ((classes == positive) | (classes == negative))
            target = torch.from_numpy(classes[pick] == positive).long()
            if target.sum() in (0, len(target)):
                continue
            for scorer, llr, style in (("model", model_llr, "-"), ("markov", markov_llr, "--")):
                fpr, tpr, _ = binary_roc(torch.from_numpy(-np.asarray(llr)[pick]), target)
                au = summary["genomes"][genome][scorer]["auroc"][f"{positive}_vs_{negative}"]
                ax.plot(fpr.numpy(), tpr.numpy(), style, label=f"{genome} {scorer} ({au:.3f})")
        ax.plot([0, 1], [0, 1], ":", color="grey", linewidth=0.8)
        ax.set(title=f"{positive.replace('_', '-')} vs {negative}", xlabel="false positive rate",
               ylabel="true positive rate")
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)
    return True
