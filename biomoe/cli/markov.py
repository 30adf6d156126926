"""``biomoe markov``: held-out bits/base of order-k Markov models for k = 0..K on a genome.

The options pick the genome, the split and the smoothing; the table comes from
:func:`biomoe.genomics.markov_report.markov_table`, is printed, and is written as JSON with ``--out``.
With ``--ckpt_path`` the genome, window length and split are the ones that checkpoint was trained
and validated with, so the order-6 row is the ``val/markov_bits_per_base`` that fit and validate
report for it.

    python cli.py markov data/large/ecoli536_NC_008253.fna.gz --max-order 8 --out out.json
    python cli.py markov --ckpt_path runs/genome --max-order 8
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from biomoe.cli.arguments import CommandParser
from biomoe.cli.grammar import add_option
from biomoe.files import write_text
from biomoe.output_checks import check_outputs

__all__ = ["main", "split_settings"]

# The datamodule settings that decide which bases are held out and how they are windowed.
SPLIT_KEYS = ("fasta", "seq_length", "stride", "max_n_fraction", "seed", "val_fraction", "val_contigs", "val_files",
              "test_fraction", "test_contigs", "test_files", "fold_lowercase", "cache_dir")


def split_settings(args) -> dict:
    """GenomeDataModule arguments: the checkpoint's recorded split (``--ckpt_path``), then what
    the command line sets; no augmentation (validation windows never have any)."""
    from biomoe.checkpoint.records import training_data_settings  # after parsing: --help stays fast
    from biomoe.checkpoint.run_folder import resolve_checkpoint
    from biomoe.checkpoint.verify import check_checkpoint_file
    from biomoe.cli.windows import command_window
    from biomoe.errors import GenomeInputError

    settings: dict = {"val_fraction": 0.1}
    if args.ckpt_path is not None:
        ckpt = resolve_checkpoint(args.ckpt_path)
        check_checkpoint_file(ckpt)  # missing or not a checkpoint: said as such
        recorded = training_data_settings(ckpt)
        if not recorded.get("fasta"):
            raise GenomeInputError(args.ckpt_path, "records no training data settings; give the FASTA files, "
                                                   "--seq-length and --val-fraction")
        settings.update({k: v for k, v in recorded.items() if k in SPLIT_KEYS and v is not None})
    elif not args.fasta:
        raise GenomeInputError(None, "markov needs FASTA files or --ckpt_path")
    given = {"fasta": args.fasta or None, "val_fraction": args.val_fraction, "val_contigs": args.val_contigs}
    settings.update({k: v for k, v in given.items() if v is not None})
    # the window every command reads: given, else the checkpoint's, else the default; checked alike
    settings["seq_length"] = command_window(args.seq_length, settings.get("seq_length"), "--seq-length")
    settings["rc_prob"] = 0.0
    return settings


def _as_list(fasta: str | os.PathLike[str] | list) -> list[str]:
    """The FASTA inputs as a list of paths: a checkpoint records one file as a plain string."""
    if isinstance(fasta, (str, os.PathLike)):
        return [os.fspath(fasta)]
    return [os.fspath(path) for path in fasta]


def main(argv: list[str]) -> int:
    parser = CommandParser(prog="biomoe markov", description=__doc__.splitlines()[0])
    parser.add_argument("fasta", nargs="*",
                        help="FASTA file(s) or folder (default with --ckpt_path: its training data)")
    parser.add_argument("--ckpt_path", "--ckpt-path", default=None, metavar="CKPT",
                        help="score the split this checkpoint (or run folder) was validated on")
    add_option(parser, "--max-order", "--max_order", type=int, default=8)
    parser.add_argument("--alpha", type=float, default=1.0, help="add-alpha smoothing")
    add_option(parser, "--seq-length", "--seq_length", type=int, default=None,
               help="bases per held-out window (default: the checkpoint's training seq_length, else 1024)")
    add_option(parser, "--val-fraction", "--val_fraction", type=float, default=None,
               help="default 0.1, or the checkpoint's")
    add_option(parser, "--val-contigs", "--val_contigs", nargs="*", default=None)
    add_option(parser, "--no-rc", "--no_rc", action="store_true", help="count the forward strand only")
    add_option(parser, "--out", "--json", type=Path, default=None, help="also write the table here, as JSON")
    args = parser.parse_args(argv)
    # imported after parsing: --help stays fast
    from biomoe.data.datamodule import GenomeDataModule
    from biomoe.genomics.markov import MAX_ORDER
    from biomoe.genomics.markov_report import markov_table
    if not 0 <= args.max_order <= MAX_ORDER:
        parser.error(f"--max-order must be in 0..{MAX_ORDER}")
    settings = split_settings(args)
    args.fasta, args.seq_length, args.val_fraction = _as_list(settings["fasta"]), settings["seq_length"], \
        settings["val_fraction"]
    check_outputs([args.out], args.fasta)  # never over an input
    dm = GenomeDataModule(**settings)
    start = time.perf_counter()
    rows = markov_table(dm, args.max_order, args.alpha, not args.no_rc)
    seconds = time.perf_counter() - start
    best = min(rows, key=lambda r: r["bits_per_base"])
    print(f"order-k Markov on {', '.join(args.fasta)}: fit on train split, scored on "
          f"{rows[0]['positions']:,} held-out bases (seq_length {args.seq_length}, alpha {args.alpha})")
    print("order  bits/base")
    for row in rows:
        mark = "  <- best" if row is best else ""
        print(f"{row['order']:>5}  {row['bits_per_base']:.4f}{mark}")
    print(f"({seconds:.1f} s)")
    if args.out is not None:
        write_text(args.out, json.dumps({"fasta": args.fasta, "alpha": args.alpha,
                                          "reverse_complement": not args.no_rc,
                                          "seq_length": args.seq_length, "val_fraction": args.val_fraction,
                                          "rows": rows, "seconds": seconds}, indent=2) + "\n")
    return 0
