"""``biomoe repeat-mix``: held-out bits/base of a model alone and mixed with the repeat expert.

The base model is a checkpoint (first, ``repeat-mix CKPT genome.fa``, or ``--ckpt_path``) or, without
one, an order-k Markov model fitted on the training split. The repeat table is fitted on the training
split too (both strands), so the mixed number is a held-out score like any other: same split,
windows and positions as ``validate``
(:mod:`biomoe.genomics.repeat_mix` computes it).

    python cli.py repeat-mix last.ckpt data/large/ecoli536_NC_008253.fna.gz --out out.json
    python cli.py repeat-mix data/large/ecoli536_NC_008253.fna.gz --markov-order 7
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from biomoe.cli.arguments import CommandParser, is_model_path, positive_int
from biomoe.cli.grammar import add_option
from biomoe.files import write_text
from biomoe.output_checks import check_outputs

if TYPE_CHECKING:
    import torch

    from biomoe.genomics.repeat_mix import LogProbs

__all__ = ["checkpoint_log_probs", "main"]


def checkpoint_log_probs(path: str, device: torch.device) -> LogProbs:
    """The network of checkpoint ``path``, built to run on ``device`` (bf16 and the training
    kernels on a GPU), as the base model of the mixture."""
    import torch  # imported once the command runs: --help stays fast

    from biomoe.inference.load import load_for_inference

    loaded = load_for_inference(path, device)

    def log_probs(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.log_softmax(loaded(batch["input_ids"].to(loaded.device)).logits.float(), dim=-1)

    return log_probs


def main(argv: list[str]) -> int:
    parser = CommandParser(prog="biomoe repeat-mix", description=__doc__.splitlines()[0])
    parser.add_argument("fasta", nargs="+", help="FASTA file(s) or folder")
    add_option(parser, "--ckpt_path", "--ckpt-path", "--ckpt", dest="ckpt", default=None,
               help="biomoe checkpoint, or a run folder (default: an order-k Markov base)")
    parser.add_argument("--markov-order", type=int, default=7)
    parser.add_argument("--k", type=int, default=None, help="repeat context length (default: log4(2N) + 6)")
    parser.add_argument("--switch", type=float, default=0.003, help="fixed-share weight moved per base")
    parser.add_argument("--smoothing", type=float, default=0.005, help="add-δ for the repeat counts")
    parser.add_argument("--follow-copies", action="store_true",
                        help="keep following a copy past mismatches (XM-style copy expert)")
    parser.add_argument("--seq-length", type=positive_int, default=None,
                        help="bases per held-out window (default: the checkpoint's training seq_length, else 1024)")
    parser.add_argument("--val-fraction", type=float, default=0.1)
    parser.add_argument("--val-contigs", nargs="*", default=None)
    parser.add_argument("--batch-size", type=positive_int, default=64)
    add_option(parser, "--out", "--json", type=Path, default=None, help="also write the result here, as JSON")
    parser.add_argument("--plot", type=Path, default=None,
                        help="PNG of bits/base per held-out window, alone and mixed, along the genome")
    args = parser.parse_args(argv)
    if args.ckpt is None and len(args.fasta) > 1 and is_model_path(args.fasta[0]):
        args.ckpt, args.fasta = args.fasta[0], args.fasta[1:]  # ``repeat-mix CKPT genome.fa``: the model first
    # imported after parsing: --help stays fast
    import torch

    from biomoe.data.datamodule import GenomeDataModule
    from biomoe.genomics.markov import MAX_ORDER
    from biomoe.genomics.repeat_expert import check_settings, fit_on_training_split
    from biomoe.genomics.repeat_mix import markov_log_probs, score
    from biomoe.training.reports.plots import plot_repeat_gain

    check_outputs([args.out, args.plot], [*args.fasta, args.ckpt])  # never over an input
    if args.ckpt is not None:
        from biomoe.checkpoint.run_folder import resolve_checkpoint

        args.ckpt = resolve_checkpoint(args.ckpt)  # a run folder: its best checkpoint, said once
    from biomoe.cli.windows import scoring_window

    args.seq_length = scoring_window(args.seq_length, args.ckpt, "--seq-length")  # checked against the training length
    if args.ckpt is None and not 0 <= args.markov_order <= MAX_ORDER:
        parser.error(f"--markov-order must be in 0..{MAX_ORDER}")
    check_settings(args.k, args.switch, args.smoothing)
    start = time.perf_counter()
    dm = GenomeDataModule(fasta=args.fasta, seq_length=args.seq_length, val_fraction=args.val_fraction,
                          val_contigs=args.val_contigs, rc_prob=0.0, packing=False)  # scored and plotted per window
    dm.setup("validate")
    if dm.val_dataset is None:
        parser.error("validation is disabled (val_fraction=0 and no val_contigs)")
    table = fit_on_training_split(dm, args.k)
    k = table.k
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.ckpt is not None:
        base, base_name = checkpoint_log_probs(args.ckpt, device), args.ckpt
    else:
        base, base_name = markov_log_probs(dm, args.markov_order), f"order-{args.markov_order} Markov"
    result = score(dm, base, table, args.switch, args.smoothing, args.batch_size, per_window=args.plot is not None,
                   follow_copies=args.follow_copies)
    result.update(base=base_name, k=k, switch=args.switch, smoothing=args.smoothing, follow_copies=args.follow_copies,
                  training_bases=table.training_bases, table_entries=len(table), fasta=args.fasta,
                  seq_length=args.seq_length, seconds=time.perf_counter() - start)
    print(f"{base_name} on {result['positions']:,} held-out bases of {', '.join(args.fasta)}: "
          f"{result['base_bits_per_base']:.4f} bits/base alone, {result['mixed_bits_per_base']:.4f} "
          f"with the repeat expert (k={k}, switch {args.switch}, smoothing {args.smoothing}"
          f"{', following copies' if args.follow_copies else ''}"
          f"{'; exact matches only: %.4f' % result['exact_mixed_bits_per_base'] if args.follow_copies else ''}); "
          f"{result['repeat_fraction']:.2%} of positions follow a training k-mer: "
          f"{result['base_on_repeats_bits_per_base']:.3f} -> {result['mixed_on_repeats_bits_per_base']:.3f} "
          f"bits/base there ({result['seconds']:.0f} s)")
    windows = result.pop("windows", None)
    if args.out is not None:
        write_text(args.out, json.dumps(result, indent=2) + "\n")
    if windows is not None:
        title = f"{base_name} alone and with the repeat expert (k={k}), held-out windows"
        written = plot_repeat_gain(windows, args.plot, title)  # atomic; None without matplotlib
        print(f"plot: {written}" if written else "plot: skipped (matplotlib is not installed)")
    return 0
