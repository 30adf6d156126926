"""``biomoe routing``: which experts the bases of each genome (and species) are routed to.

What is counted, and what the JSON holds, is described in :mod:`biomoe.genomics.routing`; the
heatmaps are drawn by :mod:`biomoe.genomics.routing_plot`. ``--from-json`` redraws them from a
JSON file this command wrote, without the model. The console gets the experts' load per MoE block,
what each expert takes most (with ``--features``) and a note for every expert that took no bases
(:mod:`biomoe.genomics.routing_summary`). ``--features`` adds the genomic classes of the
routed bases (:mod:`biomoe.genomics.routing_features`): opt-in because calling the genes of a
genome (pyrodigal) takes seconds per 5 Mb, longer than routing its windows on a GPU.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from biomoe.cli.arguments import CommandParser, add_checkpoint_argument, checkpoint_of, positive_int
from biomoe.cli.grammar import add_option, merge_hidden_inputs
from biomoe.data.sources.fasta_paths import file_labels, resolve_fasta_paths
from biomoe.data.sources.registry import open_reader
from biomoe.errors import GenomeInputError
from biomoe.output_checks import check_outputs
from biomoe.output_set import commit_together
from biomoe.genomics.routing_plot import features_plot_path, plot_features, plot_routing, require_matplotlib
from biomoe.progress import progress_bar

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="biomoe routing", description=__doc__.splitlines()[0],
                           epilog="Species: the part of a genome's label (its file name without FASTA/gzip "
                                  "suffixes) before the first '_': ecoli_536.fna.gz and ecoli_k12.fa are species "
                                  "'ecoli'. Fractions, species means and the JSD summary are described in the "
                                  "module biomoe.genomics.routing.")
    add_checkpoint_argument(parser, inputs="fasta")
    parser.add_argument("fasta", nargs="*",
                        help="FASTA files (or folders of them), one genome each; the species of a genome is its "
                             "label (file name without FASTA/gzip suffixes) up to the first '_', e.g. "
                             "ecoli_536.fna.gz -> ecoli")
    parser.add_argument("--fasta", dest="fasta_option", nargs="+", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--windows", type=positive_int, default=64,
                        help="windows per genome, spread evenly over its contigs (default %(default)s)")
    add_option(parser, "--seq-length", "--seq_length", type=positive_int, default=None,
               help="bases per window (default: the checkpoint's training seq_length, else 1024)")
    add_option(parser, "--batch-size", "--batch_size", type=positive_int, default=16,
               help="windows per forward pass (default %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("routing.json"),
                        help="output JSON, written atomically (default %(default)s)")
    parser.add_argument("--plot", type=Path, default=None,
                        help="heatmap PNG, one panel per MoE layer (default: --out with .png)")
    add_option(parser, "--no-plot", "--no_plot", action="store_true", help="write the JSON only")
    parser.add_argument("--features", action="store_true",
                        help="also count assignments per genomic class of the routed base (coding or not, codon "
                             "position and gene strand from Prodigal gene calls, window GC bin, species) and draw "
                             "experts x classes enrichment beside --plot as <plot>-features.png; gene calling "
                             "takes a few seconds per 5 Mb genome. With --from-json: the JSON must hold them")
    add_option(parser, "--from-json", "--from_json", type=Path, default=None,
               help="draw --plot (and <plot>-features.png if the JSON holds genomic classes) from a "
                    "JSON this command wrote, without the model")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: cuda where available (default %(default)s)")
    add_option(parser, "--no-progress", "--no_progress", action="store_true", help="no progress bar on stderr")
    return parser


def _device(choice: str) -> str:
    import torch  # imported once the command runs: --help stays fast

    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        raise GenomeInputError(None, "--device cuda: no CUDA device is available (use --device cpu)")
    return choice


def _replot(args: argparse.Namespace) -> int:
    if args.ckpt_path or args.ckpt or args.fasta:
        raise GenomeInputError(None, "--from-json draws an existing result: leave out the checkpoint and the FASTA "
                                     "files")
    if args.plot is None:
        raise GenomeInputError(None, "--from-json needs --plot, the PNG to write")
    from biomoe.genomics.routing import read_report  # imports torch: only once the command runs

    require_matplotlib()
    report = read_report(args.from_json)
    if args.features and "features" not in report:
        raise GenomeInputError(args.from_json, "holds no genomic classes (it was written without --features)")
    plots = [args.plot] + ([features_plot_path(args.plot)] if "features" in report else [])
    check_outputs(plots, [args.from_json])
    with commit_together(plots) as outputs:  # both figures of one result, or neither
        plot_routing(report, outputs.temp(args.plot), atomic=False)
        if len(plots) > 1:
            plot_features(report, outputs.temp(plots[1]), atomic=False)
    for path in plots:
        print(f"wrote {path}")
    return 0


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    merge_hidden_inputs(args, "fasta", "fasta_option")  # --fasta, as earlier versions took them
    if args.from_json is not None:
        return _replot(args)
    args = checkpoint_of(args, parser)  # a run folder -> its best checkpoint
    # imported after parsing: --help stays fast
    from biomoe.checkpoint.verify import check_checkpoint_file
    from biomoe.genomics.routing import RoutingCounter, genome_routing, routing_report, to_json
    from biomoe.genomics.routing_summary import routing_summary_lines
    from biomoe.cli.windows import scoring_window
    from biomoe.inference.load import load_for_inference
    plot = None if args.no_plot else (args.plot or args.out.with_suffix(".png"))
    features_plot = features_plot_path(plot) if plot is not None and args.features else None
    ckpt = args.ckpt
    check_checkpoint_file(ckpt)
    seq_length = scoring_window(args.seq_length, ckpt, "--seq-length")  # checked against the training length
    paths = resolve_fasta_paths(args.fasta)  # folders -> their FASTA files
    labels = file_labels(paths)
    genomes = [open_reader(path) for path in paths]  # validates every file before any work
    if plot is not None:
        require_matplotlib()
    if args.features:
        from biomoe.genomics.routing_features import genome_features, require_gene_caller

        require_gene_caller()
    check_outputs([args.out, plot, features_plot], [ckpt, *paths])
    device = _device(args.device)
    # The hooks count the choices of whichever router the build picked (TE's fused router gives the
    # torch router's choices; both route in fp32).
    loaded = load_for_inference(ckpt, device)
    model = loaded.module
    counter = RoutingCounter(model)
    results = []
    with progress_bar(len(genomes) * args.windows * seq_length, "routing", disable=args.no_progress) as bar:
        for genome, label in zip(genomes, labels):
            features = None
            if args.features:  # one genome's per-base states at a time: a genome's worth of memory
                started = time.perf_counter()
                features = genome_features(genome, label)
                genes = f"{features.genes:,} gene{'' if features.genes == 1 else 's'}"
                print(f"routing: {label}: {genes} ({features.mode} mode), {features.coding_fraction:.1%} of bases "
                      f"coding ({time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)
            with loaded.running():
                results.append(genome_routing(model, counter, genome, label, args.windows, seq_length,
                                              args.batch_size, progress=bar, features=features))
    report = routing_report(results, counter.layers, counter.num_experts, counter.top_k, seq_length, args.windows,
                            str(ckpt), shlex.join(["biomoe", "routing", *argv]))
    # the JSON and its figures appear together, or (a failure drawing or writing any) none changes
    with commit_together([p for p in (args.out, plot, features_plot) if p is not None]) as outputs:
        outputs.temp(args.out).write_text(to_json(report), encoding="utf-8")
        if plot is not None:
            plot_routing(report, outputs.temp(plot), atomic=False)
        if features_plot is not None:
            plot_features(report, outputs.temp(features_plot), atomic=False)
    print(f"wrote {args.out} ({len(results)} genomes, {len(report['species'])} species, "
          f"{len(counter.layers)} MoE layers)")
    for line in routing_summary_lines(report):
        print(line)
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
        print(f"wrote {plot}")
    if features_plot is not None:
        print(f"wrote {features_plot}")
    return 0
