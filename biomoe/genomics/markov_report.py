"""``biomoe markov``: held-out bits/base of order-k Markov models for k = 0..K on a genome.

Uses the same split, windows and loss function as ``biomoe validate`` (a
:class:`~biomoe.data.datamodule.GenomeDataModule` with the given ``seq_length``), so the table is directly
comparable with a network's ``val/bits_per_base`` and tells which ``order`` to give
:class:`~biomoe.training.markov_baseline.MarkovBaseline`.

    python cli.py markov data/large/ecoli536_NC_008253.fna.gz --max-order 8 --json out.json
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from biomoe.cli.arguments import CommandParser
from biomoe.genomics.markov import training_sequences
from biomoe.data.datamodule import GenomeDataModule
from biomoe.model.losses import LN2, masked_cross_entropy_sum
from biomoe.genomics.markov import MAX_ORDER, MarkovModel
from biomoe.files import check_outputs, write_text


def markov_table(datamodule: GenomeDataModule, max_order: int, alpha: float = 1.0,
                 reverse_complement: bool = True, batch_size: int = 64) -> list[dict[str, float]]:
    """[{order, bits_per_base, positions}] on the datamodule's validation windows."""
    datamodule.setup("validate")
    if datamodule.val_dataset is None:
        raise ValueError("validation is disabled (val_fraction=0 and no val_contigs)")
    full = MarkovModel.fit(training_sequences(datamodule), max_order, alpha, reverse_complement)
    models = [full.truncated(k) for k in range(max_order + 1)]
    sums = torch.zeros(max_order + 1, dtype=torch.float64)
    count = 0.0
    vocab = datamodule.vocab_size
    for batch in DataLoader(datamodule.val_dataset, batch_size=batch_size, shuffle=False):
        for k, model in enumerate(models):
            ce_sum, n = masked_cross_entropy_sum(model.logits(batch["labels"], vocab), batch["labels"],
                                                 batch["loss_mask"])
            sums[k] += float(ce_sum)
        count += float(n)
    return [{"order": k, "bits_per_base": float(sums[k] / max(count, 1.0)) / LN2, "positions": int(count)}
            for k in range(max_order + 1)]


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
