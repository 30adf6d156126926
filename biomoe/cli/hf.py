"""``biomoe export-hf`` and ``biomoe import-hf``: a checkpoint to a transformers Mixtral folder and back.

Both are ``prog SOURCE OUT`` or ``prog SOURCE --out OUT`` (export-hf also takes its checkpoint as
``--ckpt_path``): a conversion has one input and one output, so the destination may follow the
source as the README writes it, and ``--help`` shows both spellings
(:mod:`biomoe.cli.grammar`). The conversion itself is :mod:`biomoe.interop.hf`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from biomoe.cli.arguments import CommandParser, add_checkpoint_argument, checkpoint_of

__all__ = ["export_main", "import_main"]


def _output(parser: argparse.ArgumentParser, out: Path | None, positional: str | None) -> str:
    """The one output: ``--out``, or the positional after the source."""
    given = ([os.fspath(out)] if out is not None else []) + ([positional] if positional is not None else [])
    if len(given) != 1:
        if not given:
            parser.error("the following arguments are required: --out")
        parser.error(f"expected one output, got {len(given)}: {' '.join(given)}")
    return given[0]


def export_main(argv: list[str]) -> int:
    """``export-hf CKPT DIR`` or ``export-hf CKPT --out DIR``; ``--ckpt_path CKPT`` as every model command."""
    parser = CommandParser(prog="biomoe export-hf", description="checkpoint -> MixtralForCausalLM folder "
                           "(weights, tokenizer, generation config, model card)")
    add_checkpoint_argument(parser)
    parser.add_argument("out_dir", nargs="?", default=None, metavar="OUT",
                        help="the folder to write (or give it as --out)")
    parser.add_argument("--out", type=Path, default=None, help="the folder to write")
    args = parser.parse_args(argv)
    if args.ckpt_path is not None and args.ckpt is not None:  # --ckpt_path CKPT DIR: the positional is DIR
        if args.out_dir is not None:
            parser.error(f"expected one output, got 2: {args.ckpt} {args.out_dir}")
        args.out_dir, args.ckpt = args.ckpt, None
    out = _output(parser, args.out, args.out_dir)
    args = checkpoint_of(args, parser)
    from biomoe.interop.hf import export_hf  # imported after parsing: --help stays fast

    print(f"wrote {export_hf(args.ckpt, out)}")
    return 0


def import_main(argv: list[str]) -> int:
    """``import-hf HF_DIR CKPT`` or ``import-hf HF_DIR --out CKPT``."""
    parser = CommandParser(prog="biomoe import-hf", description="MixtralForCausalLM folder -> checkpoint")
    parser.add_argument("hf_dir", help="the transformers model folder to read")
    parser.add_argument("out_ckpt", nargs="?", default=None, metavar="OUT",
                        help="the checkpoint to write (or give it as --out)")
    parser.add_argument("--out", type=Path, default=None, help="the checkpoint to write")
    args = parser.parse_args(argv)
    out = _output(parser, args.out, args.out_ckpt)
    from biomoe.interop.hf import import_hf  # imported after parsing: --help stays fast

    print(f"wrote {import_hf(args.hf_dir, out)}")
    return 0
