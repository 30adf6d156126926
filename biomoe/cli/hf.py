"""``biomoe export-hf`` and ``biomoe import-hf``: a checkpoint to a transformers Mixtral folder and back.

Both are ``prog SOURCE DEST``; the conversion itself is :mod:`biomoe.interop.hf`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from biomoe.cli.arguments import CommandParser
from biomoe.interop.hf import export_hf, import_hf

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
    return _convert_main(argv, "biomoe export-hf",
                         "checkpoint -> MixtralForCausalLM folder (weights, tokenizer, generation config, model card)",
                         "ckpt", "out_dir", export_hf)


def import_main(argv: list[str]) -> int:
    return _convert_main(argv, "biomoe import-hf", "MixtralForCausalLM folder -> checkpoint",
                         "hf_dir", "out_ckpt", import_hf)
