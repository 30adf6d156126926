"""The one table of biomoe's subcommands: what each does and which function runs it.

``fit``, ``validate``, ``test`` and ``predict`` are LightningCLI's (run by
:mod:`biomoe.cli.lightning_cli`); every other command is a function ``main(argv) -> int`` in a
module of this package, imported only when that command runs so that ``--help`` stays quick.
Adding a subcommand is one row here and one module (docs/extending.md).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Command", "COMMANDS", "LIGHTNING_COMMANDS", "EXTRA_COMMANDS", "COMMAND_SUMMARIES"]


@dataclass(frozen=True)
class Command:
    """One subcommand: ``summary`` is its line in ``cli.py --help`` (short enough for one terminal
    line; Lightning's own docstrings are cut mid-sentence there); ``target`` is
    ``"module:function"`` for commands biomoe runs itself, None for LightningCLI's."""

    summary: str
    target: str | None = None


COMMANDS: dict[str, Command] = {
    "fit": Command("train a model on FASTA genomes"),
    "validate": Command("held-out bits/base on the validation split"),
    "test": Command("held-out bits/base on the test split"),
    "predict": Command("per-window held-out scores, written to predictions/"),
    "prepare": Command("pack FASTA or a corpus into a checksummed .2bit store", "biomoe.cli.prepare:main"),
    "markov": Command("bits/base of order-k Markov baselines on a genome", "biomoe.cli.markov:main"),
    "repeat-mix": Command("bits/base of a model mixed with the repeat expert", "biomoe.cli.repeat_mix:main"),
    "score-fasta": Command("log-likelihood of each sequence (and base) in FASTA", "biomoe.cli.score_fasta:main"),
    "score-variants": Command("variant effects (log-likelihood ratio), TSV or VCF", "biomoe.cli.score_variants:main"),
    "mutations": Command("zero-shot AUROC on coding SNVs, model vs Markov", "biomoe.cli.mutations:main"),
    "export-hf": Command("export a checkpoint as a transformers model folder", "biomoe.cli.hf:export_main"),
    "import-hf": Command("import a transformers Mixtral folder as a checkpoint", "biomoe.cli.hf:import_main"),
    "generate": Command("sample DNA from a checkpoint (prompt, top-k, top-p)", "biomoe.cli.generate:main"),
    "embed": Command("hidden states per base, window or contig, as .npz", "biomoe.cli.embed:main"),
    "routing": Command("which experts each genome routes to (JSON, heatmap)", "biomoe.cli.routing:main"),
    "recipes": Command("list the shipped training recipes, or copy one out", "biomoe.cli.recipes:main"),
}

LIGHTNING_COMMANDS: tuple[str, ...] = tuple(name for name, c in COMMANDS.items() if c.target is None)
EXTRA_COMMANDS: dict[str, str] = {name: c.target for name, c in COMMANDS.items() if c.target is not None}
COMMAND_SUMMARIES: dict[str, str] = {name: c.summary for name, c in COMMANDS.items()}
