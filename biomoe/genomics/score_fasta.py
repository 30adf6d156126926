"""``biomoe score-fasta``: per-base log-likelihoods and per-sequence scores for FASTA input.

A dedicated subcommand rather than ``biomoe predict``: scoring arbitrary FASTA files needs no
training split, datamodule or Trainer, only a checkpoint and a genome, and its output (one row per
sequence plus per-base arrays keyed by contig) does not fit Lightning's batch-shaped predictions.

Long contigs are scored in consecutive windows of ``--window`` bases (the training length by
default); like in training, each window starts with a fresh context, so the first bases of a window
are predicted with little context. Outputs:

* ``OUT.tsv``: contig, length, scored_bases (A/C/G/T), log_likelihood (nats), bits_per_base;
* ``OUT.npz`` (``--per-base``): one float32 array of per-base log p (nats, NaN at non-ACGT) per contig.

``--repeat-expert`` scores with the network mixed with the repeat expert (:mod:`biomoe.genomics.repeat_expert`),
the model whose held-out bits/base ``RepeatMixture`` logs: its table is fitted on the training split
the checkpoint records (or on ``--repeat-fasta`` files), and mixing stays causal within each window.
Sequence that is in the table (the training genome itself) scores near 0 bits/base: that measures
the table's memory, not the model, so score held-out or new sequence with it.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from biomoe.cli.arguments import CommandParser
from biomoe.errors import GenomeInputError
from biomoe.data.fasta import Genome
from biomoe.files import atomic_path, check_outputs
from biomoe.checkpoint.run_folder import resolve_checkpoint
from biomoe.inference.scoring import load_model, sequence_log_likelihood
from biomoe.model.transformer import MoETransformer
from biomoe.genomics.repeat_expert import RepeatExpert
from biomoe.data.tokenizer import NucleotideTokenizer

__all__ = ["score_genome", "main", "positive_int", "write_output"]


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def write_output(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` into a temporary file that then atomically becomes ``path``
    (:func:`biomoe.files.atomic_path`: never a half-written output, never over an input); OS errors
    become one line naming ``path``."""
    with atomic_path(path) as tmp:
        write(tmp)


def score_genome(model: MoETransformer, genome: Genome, window: int = 1024, batch_size: int = 8,
                 repeat: RepeatExpert | None = None, progress=None) -> dict[str, np.ndarray]:
    """Per-base log-likelihood (nats) for every contig, window by window; with ``repeat``, of the
    network mixed with that repeat expert. ``progress`` (tqdm-like) advances by the bases scored."""
    tokenizer = NucleotideTokenizer()
    result: dict[str, np.ndarray] = {}
    for info in genome.contigs:
        starts = range(0, info.length, window)
        scores: list[np.ndarray] = []
        for first in range(0, len(starts), batch_size):  # a batch at a time, so progress can show
            batch = starts[first:first + batch_size]
            pieces = [tokenizer.encode(genome.fetch(info.name, s, min(s + window, info.length))) for s in batch]
            batch_scores = sequence_log_likelihood(model, pieces, batch_size=batch_size)
            if repeat is not None:
                batch_scores = [repeat.mix(ll, ids) for ll, ids in zip(batch_scores, pieces)]
            scores.extend(batch_scores)
            if progress is not None:
                progress.update(sum(len(piece) for piece in pieces))
        result[info.name] = np.concatenate(scores) if scores else np.zeros(0, dtype=np.float32)
    return result


def summary_rows(per_base: dict[str, np.ndarray]) -> list[dict[str, object]]:
    rows = []
    for name, values in per_base.items():
        scored = values[~np.isnan(values)]
        total = float(scored.sum())
        rows.append({"contig": name, "length": int(values.size), "scored_bases": int(scored.size),
                     "log_likelihood": total,
                     "bits_per_base": -total / math.log(2) / scored.size if scored.size else float("nan")})
    return rows


def main(argv: list[str]) -> int:
    parser = CommandParser(prog="biomoe score-fasta", description=__doc__.splitlines()[0])
    parser.add_argument("ckpt", help="Lightning checkpoint (or one written by import-hf), or a run folder: "
                        "its best checkpoint")
    parser.add_argument("fasta", nargs="+", help="FASTA file(s) or folder")
    parser.add_argument("--out", required=True, type=Path, help="output prefix: writes OUT.tsv (and OUT.npz)")
    parser.add_argument("--window", type=positive_int, default=1024)
    parser.add_argument("--batch-size", type=positive_int, default=8)
    parser.add_argument("--per-base", action="store_true", help="also write per-base scores to OUT.npz")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeat-expert", action="store_true",
                        help="mix the network with the repeat expert fitted on the checkpoint's training split")
    parser.add_argument("--repeat-fasta", nargs="+", default=None,
                        help="fit the repeat expert on all of these files instead (implies --repeat-expert)")
    parser.add_argument("--repeat-follow-copies", action="store_true",
                        help="let the repeat expert follow copies past mismatches (implies --repeat-expert)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    args = parser.parse_args(argv)
    args.ckpt = resolve_checkpoint(args.ckpt)  # a run folder -> its best checkpoint
    genome = Genome(args.fasta)
    model = load_model(args.ckpt).to(args.device)
    repeat = None
    if args.repeat_expert or args.repeat_fasta or args.repeat_follow_copies:
        from biomoe.genomics.repeat_mix import expert_for_checkpoint

        repeat = expert_for_checkpoint(args.ckpt, args.repeat_fasta, follow_copies=args.repeat_follow_copies)
        print(f"repeat expert: {len(repeat.table):,} k-mer entries (k={repeat.table.k}) from "
              f"{repeat.table.training_bases:,} training bases")
    tsv = args.out.with_suffix(".tsv")
    npz = args.out.with_suffix(".npz")
    # a bad --out, or one that names an input, fails before the work, not after
    check_outputs([tsv, npz if args.per_base else None], [args.ckpt, *args.fasta, *(args.repeat_fasta or [])])
    from biomoe.progress import progress_bar

    with progress_bar(genome.total_length, "score-fasta", disable=args.no_progress) as bar:
        per_base = score_genome(model, genome, args.window, args.batch_size, repeat, progress=bar)
    if repeat is not None and repeat.covered_fraction > 0.5:
        print(f"biomoe: warning: {repeat.covered_fraction:.0%} of the scored bases follow a k-mer of the repeat "
              "expert's training sequence: these scores measure its memory, not the model", file=sys.stderr)

    def write_tsv(target: Path) -> None:
        with open(target, "w") as handle:
            handle.write("contig\tlength\tscored_bases\tlog_likelihood\tbits_per_base\n")
            for row in summary_rows(per_base):
                handle.write(f"{row['contig']}\t{row['length']}\t{row['scored_bases']}\t"
                             f"{row['log_likelihood']:.6f}\t{row['bits_per_base']:.6f}\n")

    write_output(tsv, write_tsv)
    print(f"wrote {tsv}")
    if args.per_base:
        write_output(npz, lambda target: np.savez_compressed(target, **per_base))
        print(f"wrote {npz}")
    return 0
