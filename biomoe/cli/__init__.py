"""The top floor: every subcommand users type, and the one table that lists them.

* :mod:`~biomoe.cli.main` — dispatch and one-line error reports (``biomoe`` / ``cli.py``);
* :mod:`~biomoe.cli.commands` — the command table;
* :mod:`~biomoe.cli.lightning_cli` — ``fit``/``validate``/``test``/``predict`` (LightningCLI);
* :mod:`~biomoe.cli.run` — those runs' bookkeeping: reading and checking the parsed config, run
  folders, resuming, Trainer set-up, progress lines and the end-of-fit summary;
* one module per other subcommand (``score_fasta``, ``generate``, ...): its options and ``main(argv)``;
* :mod:`~biomoe.cli.arguments` — the argument parser and argument types those modules share.

Nothing below this package imports it.
"""


def main(argv: list[str] | None = None) -> int:
    """``biomoe`` (see :func:`biomoe.cli.main.main`)."""
    # imported here: importing biomoe.cli (parent of every command module) stays light
    from biomoe.cli.main import main as run

    return run(argv)


DESCRIPTION = "biomoe: Mixture-of-Experts language models for genomes. Each subcommand has its own --help."
"""What ``cli.py --help`` says above the list of subcommands."""
