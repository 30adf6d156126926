"""``biomoe generate``: sample DNA from a trained model.

The prompt is ``--prompt`` bases, a ``--prompt-region`` of the FASTA files given after the
checkpoint, or nothing (the model
starts from ``<bos>`` alone). The samples are written as one FASTA file, records ``NAME_1``,
``NAME_2``, ..., each header saying how it was drawn. Sampling itself (temperature, top-k, top-p,
the context window, one seeded stream per sample, the CUDA-graph decoding on a GPU) is
:mod:`biomoe.inference.generate`. The model runs as every inference command runs it
(``--precision`` and the kernel options; bf16 on a GPU, fp32 on a CPU).

The last stderr line times the generation alone (prefills and decoding, not loading the model):
``generated N bases in T s: R bases/s, S steps/s after the first step (first step n bases in t s,
includes warm-up; R0 bases/s, S0 steps/s over the whole run)``, a step being one base for every
sample of a batch. The first step (the prefill and the first decode step, where a GPU captures its
CUDA graph) is timed apart: on a short run it is much of the time, and the rate after it is what
longer runs approach. Benchmarks read the line in that shape.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from biomoe.cli.arguments import (CommandParser, add_checkpoint_argument, add_device_option, add_progress_option,
                                  add_runtime_options, checkpoint_of, model_from_args, positive_int)
from biomoe.cli.grammar import merge_hidden_inputs
from biomoe.data.contig_names import ContigNameError, ContigNames
from biomoe.data.sources.registry import open_reader
from biomoe.errors import GenomeInputError
from biomoe.resources import host_memory_bytes
from biomoe.files import atomic_write
from biomoe.output_checks import check_outputs
from biomoe.progress import FirstBatchClock, progress_bar

__all__ = ["build_parser", "main"]


def _prompt_from_args(args: argparse.Namespace) -> tuple[np.ndarray | None, str, list[Path]]:
    """(prompt ids, description for the FASTA header, input files)."""
    # imported once the arguments are parsed: --help stays fast
    from biomoe.data.tokenizer import NucleotideTokenizer
    from biomoe.inference.generate import parse_region

    tokenizer = NucleotideTokenizer()
    if args.prompt is not None:
        text = "".join(args.prompt.split())
        bad = sorted(set(text.upper()) - set("ACGTNRYSWKMBDHV"))
        if bad:
            raise GenomeInputError(None, f"--prompt: character(s) {''.join(bad)!r} are not IUPAC nucleotide codes")
        return tokenizer.encode(text), f"prompt={len(text)}bp", []
    if args.prompt_region is not None:
        if not args.fasta:
            raise GenomeInputError(None, "--prompt-region needs the genome the region is in: give its FASTA "
                                         "file(s) after the checkpoint")
        genome = open_reader(args.fasta)
        source = " ".join(args.fasta)
        try:
            contig, start, end = parse_region(args.prompt_region)
        except ValueError as exc:
            raise GenomeInputError(None, f"--prompt-region: {exc}") from None
        try:  # the full ID, its accession (NC_011333.1, NC_011333) or a unique prefix
            index = ContigNames(genome).resolve(contig)
        except ContigNameError as exc:
            raise GenomeInputError(source, f"--prompt-region: {exc}") from None
        contig = genome.contigs[index].name  # the header names the contig by its full ID
        length = genome.contigs[index].length
        start, end = (0, length) if start is None else (start, end)
        if end > length:
            raise GenomeInputError(source, f"--prompt-region {args.prompt_region}: beyond the end of "
                                               f"{contig} ({length:,} bp)")
        return tokenizer.encode(genome.fetch(index, start, end)), f"prompt={contig}:{start + 1}-{end}", \
            list(genome.paths)
    return None, "prompt=none", []


def _fasta_text(name: str, description: str, sequence: str, width: int) -> str:
    lines = [f">{name} {description}"]
    lines.extend(sequence[i:i + width] for i in range(0, len(sequence), width))
    return "\n".join(lines) + "\n"


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {value}")
    return value


def _temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="biomoe generate", description=__doc__.splitlines()[0])
    add_checkpoint_argument(parser)
    prompt = parser.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", default=None, help="bases to continue (default: start from <bos> alone)")
    prompt.add_argument("--prompt-region", default=None, metavar="CONTIG:START-END",
                        help="continue this region of the FASTA files (1-based, inclusive; a bare contig name = "
                             "all of it)")
    parser.add_argument("fasta", nargs="*", help="genome FASTA file(s) for --prompt-region")
    parser.add_argument("--fasta", dest="fasta_option", nargs="+", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", required=True, type=Path, help="output FASTA (written atomically)")
    parser.add_argument("--length", type=positive_int, default=1000,
                        help="bases to generate per sample (default %(default)s)")
    parser.add_argument("--num-samples", type=positive_int, default=1, help="default %(default)s")
    parser.add_argument("--batch-size", type=positive_int, default=None,
                        help="samples generated together (default: 64 on a GPU, 16 on a CPU)")
    parser.add_argument("--temperature", type=_temperature, default=1.0, help="0 = greedy (default %(default)s)")
    parser.add_argument("--top-k", type=positive_int, default=None, help="keep the k most likely bases")
    parser.add_argument("--top-p", type=_probability, default=None, help="nucleus sampling mass")
    parser.add_argument("--seed", type=int, default=0, help="default %(default)s; each sample has its own stream")
    parser.add_argument("--allow-n", action="store_true", help="let the model emit N besides A/C/G/T")
    parser.add_argument("--context", type=positive_int, default=None,
                        help="tokens the model attends to (default: the checkpoint's training seq_length, else 1024)")
    parser.add_argument("--include-prompt", action="store_true", help="write prompt + generated bases")
    parser.add_argument("--name", default="sample",
                        help="FASTA record names: NAME_1, NAME_2, ... (default %(default)s)")
    parser.add_argument("--line-width", type=positive_int, default=80, help="FASTA line width (default %(default)s)")
    parser.add_argument("--no-graph", action="store_true",
                        help="on a GPU, run each decoding step eagerly instead of replaying a CUDA graph "
                             "(slower; for comparison)")
    add_device_option(parser)
    add_runtime_options(parser)
    add_progress_option(parser)
    return parser


def check_output_size(num_samples: int, length: int) -> None:
    """Samples are held in memory until the FASTA is written (a byte per base, and a token id per
    base while sampling): more than the machine has is one line now, not the allocator's traceback."""
    needed = num_samples * length * 9
    memory = host_memory_bytes()
    if memory is not None and needed > memory:
        raise GenomeInputError(None, f"--num-samples {num_samples:,} x --length {length:,} bases need about "
                                     f"{needed / 1e9:,.0f} GB, more than this machine's {memory / 1e9:,.0f} GB; "
                                     "generate fewer or shorter samples per run")


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    """The options, the checkpoint resolved: ``CKPT [FASTA ...]`` or ``--ckpt_path CKPT [FASTA ...]``
    (the genome is needed only by ``--prompt-region``; ``--fasta FASTA`` is an older spelling)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    merge_hidden_inputs(args, "fasta", "fasta_option")
    if args.ckpt_path is not None and args.ckpt is not None:  # with --ckpt_path the first positional is a FASTA
        if args.ckpt == args.ckpt_path:
            parser.error(f"the checkpoint is given twice: {args.ckpt} and --ckpt_path {args.ckpt_path}")
        args.fasta, args.ckpt = [args.ckpt, *args.fasta], None
    return checkpoint_of(args, parser)


def main(argv: list[str]) -> int:
    args = parse_arguments(argv)
    # imported after parsing: --help stays fast
    from biomoe.cli.windows import scoring_window
    from biomoe.data.tokenizer import NucleotideTokenizer
    from biomoe.inference.generate import default_batch_size, generate
    from biomoe.inference.sampling import SamplingSettings
    import torch
    prompt, prompt_text, inputs = _prompt_from_args(args)
    check_output_size(args.num_samples, args.length)
    check_outputs([args.out], [args.ckpt, *inputs])
    context = scoring_window(args.context, args.ckpt, "--context")  # checked against the training length
    settings = SamplingSettings(args.temperature, args.top_k, args.top_p, args.allow_n)
    model = model_from_args(args)
    if prompt is not None and len(prompt) > context - 1:
        print(f"biomoe: note: the prompt has {len(prompt):,} bases; the model reads its last {context - 1:,} "
              f"(context {context:,} tokens)", file=sys.stderr)
    batch_size = args.batch_size or default_batch_size(model.device)
    decode = "static" if args.no_graph and model.device.type == "cuda" else "auto"
    # a step's update does not wait for the device: the first step ends with the one wait of the run
    sync = (lambda: torch.cuda.synchronize(model.device)) if model.device.type == "cuda" else None
    # updates: the base sampled from the prefill, then one per decode step; generate returns host arrays
    with progress_bar(args.num_samples * args.length, "generate", disable=args.no_progress) as bar, \
            FirstBatchClock(bar, sync, first_updates=2, batch="step") as clock:
        samples = generate(model, prompt, args.length, args.num_samples, settings, args.seed, batch_size,
                           context, progress=clock, decode=decode)
    tokenizer = NucleotideTokenizer()
    prefix = tokenizer.decode(prompt) if args.include_prompt and prompt is not None else ""
    description = (f"{prompt_text} length={args.length} seed={args.seed} temperature={args.temperature:g}"
                   + (f" top_k={args.top_k}" if args.top_k else "") + (f" top_p={args.top_p:g}" if args.top_p else "")
                   + (" with_prompt" if prefix else ""))
    text = "".join(_fasta_text(f"{args.name}_{i + 1}", description, prefix + tokenizer.decode(ids), args.line_width)
                   for i, ids in enumerate(samples))
    with atomic_write(args.out, "w") as handle:
        handle.write(text)
    print(f"wrote {args.out} ({len(samples)} sample(s) of {args.length:,} bases)")
    bases = args.num_samples * args.length
    print(clock.report("generated", bases, "bases",
                       lambda work, steps, seconds: f"{work / seconds:,.0f} bases/s, {steps / seconds:,.0f} steps/s"),
          file=sys.stderr)
    return 0
