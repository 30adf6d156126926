"""``biomoe score-variants``: zero-shot variant effects as a log-likelihood ratio.

Reads the variants (a TSV table, or a VCF/BCF with pysam), scores each substitution's reference
and alternative window with the checkpoint's model (:mod:`biomoe.inference.score_variants`
describes the windows, the table format and which VCF records are skipped) and writes one TSV
row per variant: the inputs, window_start (0-based), logp_ref, logp_alt and llr (nats).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


from biomoe.cli.arguments import (CommandParser, add_batch_tokens_option, add_checkpoint_argument, add_device_option,
                                  add_progress_option, add_runtime_options, checkpoint_of, model_from_args,
                                  positive_int)
from biomoe.data.registry import open_reader
from biomoe.errors import GenomeInputError
from biomoe.files import atomic_path, check_outputs
from biomoe.inference.score_variants import is_vcf, prepare_windows, read_variants, read_vcf, score_windows
from biomoe.progress import progress_bar

__all__ = ["main"]

def main(argv: list[str]) -> int:
    parser = CommandParser(prog="biomoe score-variants", description=__doc__.splitlines()[0])
    add_checkpoint_argument(parser, inputs='fasta')
    parser.add_argument("fasta", nargs="*", help="reference genome FASTA file(s)")
    parser.add_argument("--variants", required=True, type=Path,
                        help="TSV (contig, position 1-based, ref, alt) or VCF/BCF (.vcf, .vcf.gz, .bcf)")
    parser.add_argument("--out", required=True, type=Path, help="output TSV")
    parser.add_argument("--window", type=positive_int, default=1024, help="bases per window (default %(default)s)")
    add_batch_tokens_option(parser)
    add_device_option(parser, help=None)
    add_runtime_options(parser)
    add_progress_option(parser)
    args = checkpoint_of(parser.parse_args(argv), parser)  # a run folder -> its checkpoint
    check_outputs([args.out], [args.ckpt, *args.fasta, args.variants])  # --out never replaces an input
    if is_vcf(args.variants):
        variants, skipped = read_vcf(args.variants)
        if skipped:
            print(f"biomoe: note: {args.variants}: skipped {skipped:,} ALT allele(s) that are not substitutions "
                  "(indels, symbolic alleles, no ALT)", file=sys.stderr)
        if not variants:
            raise GenomeInputError(args.variants, "no substitutions to score in this VCF")
    else:
        variants = read_variants(args.variants)
    if not variants:
        raise GenomeInputError(args.variants, "no variants to score (the table is empty, or only a header "
                                              "and comments)")
    genome = open_reader(args.fasta)
    prepared = prepare_windows(genome, variants, args.window, source=str(args.variants))  # all checked first
    model = model_from_args(args)
    with progress_bar(len(variants), "score-variants", unit="variant", disable=args.no_progress) as bar:
        started = time.perf_counter()
        rows = score_windows(model, variants, prepared, progress=bar, batch_tokens=args.batch_tokens)
        elapsed = time.perf_counter() - started
    print(f"scored {len(rows):,} variants in {elapsed:.2f} s ({len(rows) / max(elapsed, 1e-9):,.0f} variants/s)",
          file=sys.stderr)
    columns = ["contig", "position", "ref", "alt", "window_start", "logp_ref", "logp_alt", "llr"]
    with atomic_path(args.out) as target, open(target, "w") as handle:
        handle.write("\t".join(columns) + "\n")
        for row in rows:
            handle.write("\t".join(f"{row[c]:.6f}" if isinstance(row[c], float) else str(row[c])
                                   for c in columns) + "\n")
    print(f"wrote {args.out} ({len(rows)} variants)")
    return 0
