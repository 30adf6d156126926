"""``biomoe embed``: hidden states of a trained model for FASTA input, per base or pooled.

Windows, layers and pooling are those of :mod:`biomoe.inference.embed`. The output ``.npz`` holds
``embeddings`` [rows, hidden], ``contig`` (row -> index into ``contig_names``), ``position``
(0-based first base of the row), ``length`` (bases the row spans), ``bases`` (A/C/G/T bases pooled
into it) and the ``layer``/``pool`` used. Memory stays bounded on long genomes: rows go straight
into a memory-mapped array on disk, which is then streamed into the ``.npz``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from biomoe.cli.arguments import (CommandParser, add_batch_tokens_option, add_checkpoint_argument, add_device_option,
                                  add_progress_option, add_runtime_options, model_from_args, parse_model_command,
                                  base_rate, positive_int)
from biomoe.data.sources.reader import total_length
from biomoe.data.sources.registry import open_reader
from biomoe.errors import GenomeInputError
from biomoe.output_checks import check_outputs
from biomoe.output_set import commit_together
from biomoe.progress import FirstBatchClock, progress_bar

__all__ = ["build_parser", "main"]


POOLS = ("position", "mean", "window")
"""``--pool``'s choices: :data:`biomoe.inference.embed.POOLS` (that module imports torch, which
``--help`` does without; tests/product/test_startup.py checks that the two agree)."""


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="biomoe embed", description=__doc__.splitlines()[0])
    add_checkpoint_argument(parser, inputs='fasta')
    parser.add_argument("fasta", nargs="*", help="FASTA file(s) or folder")
    parser.add_argument("--out", required=True, type=Path, help="output .npz (written atomically)")
    parser.add_argument("--layer", default="final",
                        help="'final' (final norm output) or a block index K (residual stream after block K)")
    parser.add_argument("--pool", choices=POOLS, default="mean",
                        help="position: a row per base; mean: a row per contig; window: a row per --pool-size bases "
                             "(default %(default)s)")
    parser.add_argument("--pool-size", type=positive_int, default=1000,
                        help="bases per row with --pool window (default %(default)s)")
    parser.add_argument("--window", type=positive_int, default=None,
                        help="bases the model reads at once (default: the checkpoint's training seq_length)")
    add_batch_tokens_option(parser)
    parser.add_argument("--batch-size", type=positive_int, default=None,
                        help="at most this many windows per forward pass (default: as many as --batch-tokens holds)")
    parser.add_argument("--dtype", choices=("float32", "float16"), default="float32",
                        help="of the stored embeddings (default %(default)s)")
    add_device_option(parser)
    add_runtime_options(parser)
    add_progress_option(parser)
    return parser


def main(argv: list[str]) -> int:
    args = parse_model_command(build_parser(), argv)
    # imported after parsing: --help stays fast
    from biomoe.cli.windows import scoring_window
    from biomoe.inference.batching import check_window_memory
    from biomoe.inference.embed import EmbeddingLayout, embed_genome, parse_layer

    genome = open_reader(args.fasta)
    check_outputs([args.out], [args.ckpt, *genome.paths])
    if args.out.suffix != ".npz":
        raise GenomeInputError(args.out, "--out must end in .npz")
    model = model_from_args(args)
    try:
        layer = parse_layer(args.layer, model.config.num_layers)
    except ValueError as exc:
        raise GenomeInputError(None, f"--layer: {exc}") from None
    longest = max(c.length for c in genome.contigs)
    window = scoring_window(args.window, args.ckpt, longest=longest)  # checked against the training length
    check_window_memory(window, model, longest)
    layout = EmbeddingLayout([c.name for c in genome.contigs], [c.length for c in genome.contigs],
                             args.pool, args.pool_size)
    index = layout.index_arrays()
    rows, hidden = len(index["contig"]), model.config.hidden_size
    # Rows go to a memory-mapped scratch file beside the output (bounded memory on any genome),
    # named as a temporary of the output: removed on any failure, and a killed run's is swept by
    # the next run for the same --out.
    with commit_together([args.out]) as outputs:
        scratch = outputs.scratch(".rows.npy")
        out = np.lib.format.open_memmap(scratch, mode="w+", dtype=np.dtype(args.dtype), shape=(rows, hidden))
        with progress_bar(total_length(genome), "embed", disable=args.no_progress) as bar, \
                FirstBatchClock(bar) as clock:
            bases = embed_genome(model, genome, out, layout, layer, window, args.batch_size, progress=clock,
                                 batch_tokens=args.batch_tokens)
        out.flush()
        arrays = {"embeddings": out, **index, "bases": bases,
                  "layer": np.array("final" if layer is None else str(layer)), "pool": np.array(args.pool)}
        with open(outputs.temp(args.out), "wb") as handle:
            np.savez(handle, **arrays)
        del out, arrays
    done = int(total_length(genome))
    print(clock.report("embedded", done, "bases", lambda work, _, seconds: base_rate(work, seconds)), file=sys.stderr)
    print(f"wrote {args.out} ({rows:,} x {hidden} embeddings, layer {'final' if layer is None else layer}, "
          f"pool {args.pool})")
    return 0
