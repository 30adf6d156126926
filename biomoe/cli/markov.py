"""``biomoe markov``: held-out bits/base of order-k Markov models for k = 0..K on a genome.

The options pick the genome, the split and the smoothing; the table comes from
:func:`biomoe.genomics.markov_report.markov_table`, is printed, and is written as JSON with ``--json``.

    python cli.py markov data/large/ecoli536_NC_008253.fna.gz --max-order 8 --json out.json
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from biomoe.cli.arguments import CommandParser
from biomoe.files import check_outputs, write_text

__all__ = ["main"]


def main(argv: list[str]) -> int:
    parser = CommandParser(prog="biomoe markov", description=__doc__.splitlines()[0])
    parser.add_argument("fasta", nargs="+", help="FASTA file(s) or folder")
    parser.add_argument("--max-order", type=int, default=8)
    parser.add_argument("--alpha", type=float, default=1.0, help="add-alpha smoothing")
    parser.add_argument("--seq-length", type=int, default=1024)
    parser.add_argument("--val-fraction", type=float, default=0.1)
    parser.add_argument("--val-contigs", nargs="*", default=None)
    parser.add_argument("--no-rc", action="store_true", help="count the forward strand only")
    parser.add_argument("--json", type=Path, default=None, help="also write the table here")
    args = parser.parse_args(argv)
    # imported after parsing: --help stays fast
    from biomoe.data.datamodule import GenomeDataModule
    from biomoe.genomics.markov import MAX_ORDER
    from biomoe.genomics.markov_report import markov_table
    if not 0 <= args.max_order <= MAX_ORDER:
        parser.error(f"--max-order must be in 0..{MAX_ORDER}")
    check_outputs([args.json], args.fasta)  # never over an input
    dm = GenomeDataModule(fasta=args.fasta, seq_length=args.seq_length, val_fraction=args.val_fraction,
                          val_contigs=args.val_contigs, rc_prob=0.0)
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
    if args.json is not None:
        write_text(args.json, json.dumps({"fasta": args.fasta, "alpha": args.alpha,
                                          "reverse_complement": not args.no_rc,
                                          "seq_length": args.seq_length, "val_fraction": args.val_fraction,
                                          "rows": rows, "seconds": seconds}, indent=2) + "\n")
    return 0
