"""``biomoe export-hf`` and ``biomoe import-hf``: a checkpoint to a transformers Mixtral folder and back.

Both are ``prog SOURCE DEST`` (export-hf also takes its checkpoint as ``--ckpt_path``); the conversion itself is :mod:`biomoe.interop.hf`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from biomoe.cli.arguments import CommandParser, add_checkpoint_argument, checkpoint_of

__all__ = ["export_main", "import_main"]


def _convert_main(argv: list[str], prog: str, description: str, source: str, dest: str,
                  convert: Callable[[str | os.PathLike[str], str | os.PathLike[str]], Path]) -> int:
    """One small CLI for both directions: ``prog SOURCE DEST`` calls ``convert(SOURCE, DEST)``."""
    parser = CommandParser(prog=prog, description=description)
    parser.add_argument(source)
    parser.add_argument(dest)
    args = vars(parser.parse_args(argv))
    print(f"wrote {convert(args[source], args[dest])}")
    return 0


def export_main(argv: list[str]) -> int:
    """``export-hf CKPT OUT_DIR``, or ``export-hf --ckpt_path CKPT OUT_DIR`` as every model command."""
    parser = CommandParser(prog="biomoe export-hf", description="checkpoint -> MixtralForCausalLM folder "
                           "(weights, tokenizer, generation config, model card)")
    add_checkpoint_argument(parser, inputs="out_dir")
    parser.add_argument("out_dir", nargs="*", help="the folder to write")
    args = checkpoint_of(parser.parse_args(argv), parser)
    from biomoe.interop.hf import export_hf  # imported after parsing: --help stays fast

    if len(args.out_dir) != 1:
        parser.error(f"expected one output folder, got {len(args.out_dir)}: {' '.join(args.out_dir)}")
    print(f"wrote {export_hf(args.ckpt, args.out_dir[0])}")
    return 0


def import_main(argv: list[str]) -> int:
    def convert(hf_dir: str | os.PathLike[str], out_ckpt: str | os.PathLike[str]) -> Path:
        from biomoe.interop.hf import import_hf  # imported once the arguments are parsed: --help stays fast

        return import_hf(hf_dir, out_ckpt)

    return _convert_main(argv, "biomoe import-hf", "MixtralForCausalLM folder -> checkpoint",
                         "hf_dir", "out_ckpt", convert)
