"""``biomoe score-fasta``: per-base log-likelihoods and per-sequence scores for FASTA input.

A dedicated subcommand rather than ``biomoe predict``: scoring arbitrary FASTA files needs no
training split, datamodule or Trainer, only a checkpoint and a genome, and its output (one row per
sequence plus per-base arrays keyed by contig) does not fit Lightning's batch-shaped predictions.

Long contigs are scored in consecutive windows of ``--window`` bases (the checkpoint's training
length by default); like in training, each window starts with a fresh context, so the first bases of a window
are predicted with little context (:mod:`biomoe.inference.score_fasta` does the scoring). Outputs:

* ``OUT.tsv``: contig, length, scored_bases (A/C/G/T), log_likelihood (nats), bits_per_base;
* ``OUT.npz`` (``--per-base``): one float32 array of per-base log p (nats, NaN at non-ACGT) per contig.

``--repeat-expert`` scores with the network mixed with the repeat expert (:mod:`biomoe.genomics.repeat_expert`),
the model whose held-out bits/base ``RepeatMixture`` logs: its table is fitted on the training split
the checkpoint records (or on ``--repeat-fasta`` files), and mixing stays causal within each window.
Sequence that is in the table (the training genome itself) scores near 0 bits/base: that measures
the table's memory, not the model, so score held-out or new sequence with it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from biomoe.cli.arguments import (CommandParser, add_batch_tokens_option, add_checkpoint_argument, add_device_option,
                                  add_progress_option, add_runtime_options, checkpoint_of, model_from_args,
                                  base_rate, positive_int)
from biomoe.data.sources.reader import total_length
from biomoe.data.sources.registry import open_reader
from biomoe.output_checks import check_outputs
from biomoe.output_set import commit_together
from biomoe.progress import FirstBatchClock, progress_bar

__all__ = ["main"]


def main(argv: list[str]) -> int:
    parser = CommandParser(prog="biomoe score-fasta", description=__doc__.splitlines()[0])
    add_checkpoint_argument(parser, inputs='fasta')
    parser.add_argument("fasta", nargs="*", help="FASTA file(s) or folder")
    parser.add_argument("--out", required=True, type=Path, help="output prefix: writes OUT.tsv (and OUT.npz)")
    parser.add_argument("--window", type=positive_int, default=None,
                        help="bases per window (default: the checkpoint's training seq_length, else 1024)")
    add_batch_tokens_option(parser)
    parser.add_argument("--batch-size", type=positive_int, default=None, help="at most this many windows per "
                        "forward pass (default: as many as --batch-tokens holds)")
    parser.add_argument("--per-base", action="store_true", help="also write per-base scores to OUT.npz")
    add_device_option(parser)
    add_runtime_options(parser)
    parser.add_argument("--repeat-expert", action="store_true",
                        help="mix the network with the repeat expert fitted on the checkpoint's training split")
    parser.add_argument("--repeat-fasta", nargs="+", default=None,
                        help="fit the repeat expert on all of these files instead (implies --repeat-expert)")
    parser.add_argument("--repeat-follow-copies", action="store_true",
                        help="let the repeat expert follow copies past mismatches (implies --repeat-expert)")
    add_progress_option(parser)
    args = checkpoint_of(parser.parse_args(argv), parser)  # a run folder -> its checkpoint
    # imported after parsing: --help stays fast
    from biomoe.cli.windows import scoring_window
    from biomoe.inference.batching import check_window_memory
    from biomoe.genomics.repeat_mix import expert_for_checkpoint
    from biomoe.inference.score_fasta import score_genome, summary_rows
    genome = open_reader(args.fasta)
    longest = max(c.length for c in genome.contigs)
    window = scoring_window(args.window, args.ckpt, longest=longest)  # checked against the training length
    model = model_from_args(args)
    check_window_memory(window, model, longest)
    repeat = None
    if args.repeat_expert or args.repeat_fasta or args.repeat_follow_copies:
        repeat = expert_for_checkpoint(args.ckpt, args.repeat_fasta, follow_copies=args.repeat_follow_copies)
        print(f"repeat expert: {len(repeat.table):,} k-mer entries (k={repeat.table.k}) from "
              f"{repeat.table.training_bases:,} training bases")
    tsv = args.out.with_suffix(".tsv")
    npz = args.out.with_suffix(".npz")
    # a bad --out, or one that names an input, fails before the work, not after
    check_outputs([tsv, npz if args.per_base else None], [args.ckpt, *args.fasta, *(args.repeat_fasta or [])])
    with progress_bar(total_length(genome), "score-fasta", disable=args.no_progress) as bar, \
            FirstBatchClock(bar) as clock:
        per_base = score_genome(model, genome, window, args.batch_size, repeat, progress=clock,
                                batch_tokens=args.batch_tokens)
    bases = sum(values.size for values in per_base.values())
    print(clock.report("scored", bases, "bases", lambda work, _, seconds: base_rate(work, seconds)), file=sys.stderr)
    if repeat is not None and repeat.covered_fraction > 0.5:
        print(f"biomoe: warning: {repeat.covered_fraction:.0%} of the scored bases follow a k-mer of the repeat "
              "expert's training sequence: these scores measure its memory, not the model", file=sys.stderr)
    # both files appear together, or (a failure at any point) neither changes
    with commit_together([tsv, npz] if args.per_base else [tsv]) as outputs:
        with open(outputs.temp(tsv), "w") as handle:
            handle.write("contig\tlength\tscored_bases\tlog_likelihood\tbits_per_base\n")
            for row in summary_rows(per_base):
                handle.write(f"{row['contig']}\t{row['length']}\t{row['scored_bases']}\t"
                             f"{row['log_likelihood']:.6f}\t{row['bits_per_base']:.6f}\n")
        if args.per_base:
            np.savez_compressed(outputs.temp(npz), **per_base)
    print(f"wrote {tsv}")
    if args.per_base:
        print(f"wrote {npz}")
    return 0
