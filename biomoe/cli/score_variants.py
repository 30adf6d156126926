"""``biomoe score-variants``: zero-shot variant effects as a log-likelihood ratio.

Reads the variants (a TSV table, or a VCF/BCF with pysam), scores each substitution's or indel's
reference and alternative window with the checkpoint's model (:mod:`biomoe.inference.score_variants`
describes the windows, what an indel's llr includes, the table format and how contigs are named;
:mod:`biomoe.inference.variant_vcf` which VCF alleles are set aside) and writes one TSV row per
variant: contig, position, id, ref, alt as read (the VCF ID or the table's id column, ``.`` when
absent, so results join back to the input), window_start (0-based), logp_ref, logp_alt and llr
(nats), then the INFO fields asked for with ``--info``. An ``--out`` ending in ``.vcf`` is written as
a VCF instead, for bcftools and genome browsers: a record per allele with those scores as INFO
fields (``LLR``, ``LOGP_REF``, ``LOGP_ALT``, ``WINDOW_START``) declared in its header; a
compressed VCF or BCF name is refused (compress the VCF afterwards).

VCF alleles that are not sequence (symbolic, ``*``, breakends, N or IUPAC codes, no ALT) are
always set aside, counted on stderr and listed with the reason in ``OUT.skipped.tsv``
(``effects.skipped.tsv`` for ``--out effects.tsv``), itself a variant table: a count alone would
not say which calls the results lack. ``--skip-mismatched`` also sets aside variants the genome
cannot score as given (reference allele not in the genome, unknown contig, beyond the contig end)
instead of stopping at the first, and lists them there too. Both files are committed together
(both new, or on a failure both as they were); a run that sets nothing aside removes a list left
by an earlier run, so the list beside an output always belongs to it. When every variant is set
aside there is nothing to score: the list alone is written and the command exits with status 2,
naming it. The stderr line that names the list comes only once the list is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from biomoe.cli.arguments import (CommandParser, add_batch_tokens_option, add_checkpoint_argument, add_device_option,
                                  add_progress_option, add_runtime_options, checkpoint_of, model_from_args,
                                  positive_int)
from biomoe.data.sources.registry import open_reader
from biomoe.errors import GenomeInputError
from biomoe.files import atomic_write
from biomoe.output_checks import check_outputs
from biomoe.output_set import commit_together
from biomoe.progress import FirstBatchClock, progress_bar

if TYPE_CHECKING:
    from biomoe.inference.score_variants import Variant

__all__ = ["main", "skipped_path"]

COLUMNS = ["contig", "position", "id", "ref", "alt", "window_start", "logp_ref", "logp_alt", "llr"]


def skipped_path(out: Path) -> Path:
    """Where the variants set aside (unscorable VCF alleles, and those of ``--skip-mismatched``)
    are listed, beside ``out``."""
    stem = out.name[:-len(".tsv")] if out.name.lower().endswith(".tsv") and len(out.name) > 4 else out.name
    return out.with_name(stem + ".skipped.tsv")


def _info_keys(text: str) -> list[str]:
    keys = [key.strip() for key in text.split(",")]
    if not all(keys) or any(set(key) & set(" \t;=") for key in keys):
        raise argparse.ArgumentTypeError(f"expected INFO keys separated by commas (AF,DP), got {text!r}")
    return keys


def _cell(value: object) -> str:
    return f"{value:.6f}" if isinstance(value, float) else str(value)


def main(argv: list[str]) -> int:
    parser = CommandParser(prog="biomoe score-variants", description=__doc__.splitlines()[0])
    add_checkpoint_argument(parser, inputs='fasta')
    parser.add_argument("fasta", nargs="*", help="reference genome FASTA file(s)")
    parser.add_argument("--variants", required=True, type=Path,
                        help="TSV (contig, position 1-based, ref, alt[, id]; a header row such as 'chrom pos ref alt' "
                             "may name them in any order) or VCF/BCF (.vcf, .vcf.gz, .bcf); substitutions and "
                             "indels, VCF-style with the base before an indel (AT>A, A>ATTG); "
                             "contigs by full FASTA ID, accession (NC_011333.1, NC_011333) or unique prefix")
    parser.add_argument("--out", required=True, type=Path,
                        help="output: VCF when it ends in .vcf (the scores as INFO fields), else TSV")
    parser.add_argument("--window", type=positive_int, default=None,
                        help="bases per window, centred on the variant (default: the checkpoint's training "
                             "seq_length, else 1024)")
    parser.add_argument("--info", type=_info_keys, action="extend", default=[], metavar="KEY[,KEY...]",
                        help="VCF INFO fields to add as columns (empty when absent; flags true/false)")
    parser.add_argument("--skip-mismatched", action="store_true",
                        help="skip variants whose ref allele does not match the genome (or on unknown contigs, "
                             "beyond the contig end), count them on stderr and list them in OUT.skipped.tsv "
                             "(where VCF alleles that are not sequence, such as <DEL>, are always listed)")
    add_batch_tokens_option(parser)
    add_device_option(parser)
    add_runtime_options(parser)
    add_progress_option(parser)
    args = checkpoint_of(parser.parse_args(argv), parser)  # a run folder -> its checkpoint
    # imported after parsing: --help stays fast
    from biomoe.cli.windows import scoring_window
    from biomoe.inference.batching import check_window_memory
    from biomoe.inference.score_variants import check_variants, read_variants, score_windows
    from biomoe.inference.variant_vcf import check_effects_output, is_vcf, read_vcf
    check_effects_output(args.out)  # .vcf.gz, .bcf: refused before any work
    sidecar = skipped_path(args.out)
    # --out never replaces an input, nor does the skipped list written or removed beside it
    check_outputs([args.out, sidecar], [args.ckpt, *args.fasta, args.variants])
    info = list(dict.fromkeys(args.info))
    unscorable: list[tuple[Variant, str]] = []  # VCF alleles that are not sequence, with the reason
    if is_vcf(args.variants):
        variants, unscorable = read_vcf(args.variants, info)
    else:
        if info:
            raise GenomeInputError(args.variants, "--info reads INFO fields of a VCF/BCF; this is a TSV table")
        variants = read_variants(args.variants)
    if not variants and not unscorable:
        raise GenomeInputError(args.variants, "no variants to score (the table is empty, or only a header "
                                              "and comments)")
    genome = open_reader(args.fasta)
    longest = max(c.length for c in genome.contigs)
    window = scoring_window(args.window, args.ckpt, longest=longest)  # checked against the training length
    variants, prepared, set_aside = check_variants(genome, variants, window, source=str(args.variants),
                                                   skip=args.skip_mismatched)  # all checked before any is scored
    set_aside = unscorable + set_aside
    if set_aside and not variants:  # nothing to score: the list is the one output, and says why
        _write_skipped(sidecar, set_aside)
        raise GenomeInputError(args.variants, f"all {len(set_aside):,} variants were skipped ({_reasons(set_aside)}; "
                                              f"first: {set_aside[0][0].label()}, {set_aside[0][1]}); "
                                              f"listed in {sidecar}")
    model = model_from_args(args)
    check_window_memory(window, model, longest)
    with progress_bar(len(variants), "score-variants", unit="variant", disable=args.no_progress) as bar, \
            FirstBatchClock(bar) as clock:
        rows = score_windows(model, variants, prepared, progress=clock, batch_tokens=args.batch_tokens)
    print(clock.report("scored", len(rows), "variants", lambda work, _, seconds: f"{work / seconds:,.0f} variants/s"),
          file=sys.stderr)
    reference = [str(p) for p in genome.paths]
    _write_results(args.out, sidecar, rows, info, set_aside,
                   {c.name: c.length for c in genome.contigs}, reference)
    mismatched = set_aside[len(unscorable):]
    if unscorable:  # said once the list is there to read
        print(f"biomoe: note: {args.variants}: skipped {len(unscorable):,} ALT allele(s) that are not A/C/G/T "
              f"sequence ({_reasons(unscorable)}); listed in {sidecar}", file=sys.stderr)
    if mismatched:
        print(f"biomoe: note: {args.variants}: skipped {len(mismatched):,} variant(s) the genome cannot score "
              f"({_reasons(mismatched)}); listed in {sidecar}", file=sys.stderr)
    print(f"wrote {args.out} ({len(rows)} variants)")
    return 0


def _reasons(set_aside: list[tuple[Variant, str]]) -> str:
    """``2 reference mismatch, 1 contig not in the genome``: how many were skipped for each reason."""
    reasons: dict[str, int] = {}
    for _, reason in set_aside:
        kind = reason.split(" (")[0]
        reasons[kind] = reasons.get(kind, 0) + 1
    return ", ".join(f"{n:,} {kind}" for kind, n in reasons.items())


SKIPPED_COLUMNS = ["contig", "position", "id", "ref", "alt", "reason"]


def _skipped_rows(handle, set_aside: list[tuple[Variant, str]]) -> None:
    handle.write("\t".join(SKIPPED_COLUMNS) + "\n")
    for variant, reason in set_aside:
        handle.write("\t".join([variant.contig, str(variant.position), variant.id, variant.ref, variant.alt,
                                reason]) + "\n")


def _write_skipped(sidecar: Path, set_aside: list[tuple[Variant, str]]) -> None:
    """The skipped list alone, written atomically (a run that scored nothing)."""
    with atomic_write(sidecar, "w") as handle:
        _skipped_rows(handle, set_aside)


def _write_results(out: Path, sidecar: Path, rows: list[dict[str, object]], info: list[str],
                   set_aside: list[tuple[Variant, str]], contig_lengths: dict[str, int] | None = None,
                   reference: list[str] | None = None) -> None:
    """The results (VCF for a ``.vcf`` name, else TSV) and the skipped list, committed together:
    both new (or, with nothing skipped, an earlier run's list removed), or on any failure both as
    they were."""
    from biomoe.inference.variant_vcf import write_effects_vcf

    header = COLUMNS + [key if key not in COLUMNS else f"info.{key}" for key in info]
    with commit_together([out, sidecar]) as outputs:
        with open(outputs.temp(out), "w") as handle:
            if out.name.lower().endswith(".vcf"):
                write_effects_vcf(handle, rows, info, contig_lengths or {}, reference or [])
            else:
                handle.write("\t".join(header) + "\n")
                for row in rows:
                    cells = [_cell(row[c]) for c in COLUMNS] + [row["info"].get(key, "") for key in info]
                    handle.write("\t".join(cells) + "\n")
        if set_aside:
            with open(outputs.temp(sidecar), "w") as handle:
                _skipped_rows(handle, set_aside)
        else:
            outputs.drop(sidecar)  # an earlier run's list would be stale beside these results
