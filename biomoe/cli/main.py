"""``biomoe`` / ``cli.py``: dispatch a subcommand and report what goes wrong as one line.

Bad input never ends in a traceback: :class:`~biomoe.errors.GenomeInputError` and
:class:`~biomoe.model.config.ConfigError`, and what Lightning, torch or jsonargparse say about a
user's values (:mod:`biomoe.cli.user_errors`), are printed as one line with exit status 2;
Ctrl-C is one line (``biomoe: interrupted ...``, the user's stop, not an error) and exit status
130. Every value is range-checked before anything is built
(:mod:`biomoe.cli.run.config_checks`), every checkpoint is verified before it is loaded
(:mod:`biomoe.checkpoint.verify`), and no output may replace an input (:mod:`biomoe.output_checks`).
Pass ``--debug`` (or set ``BIOMOE_DEBUG=1``) to see the traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import io
import logging
import os
import re
import sys
import warnings
from argparse import ArgumentError

from biomoe import output_checks
from biomoe.cli import DESCRIPTION
from biomoe.cli.commands import COMMANDS, EXTRA_COMMANDS, LIGHTNING_COMMANDS
from biomoe.cli import help_cache
from biomoe.cli.grammar import checkpoint_first
from biomoe.cli.recipes import expand_recipe_names
from biomoe.cli.user_errors import INTERRUPTED, classify
from biomoe.cli.warning_lines import VERBOSE_ENV, VERBOSE_OPTION, WarningLines, quiet_known_noise
from biomoe.checkpoint.safe_types import TRUST_OPTION, trusted, trusting

__all__ = ["main", "summarize_argument_error"]


def _say_replaced(code: int) -> None:
    """Outputs that existed before the command: named once it has succeeded (stdout, beside its
    "wrote ..." lines); after a failure they are as they were, and nothing is said."""
    note = output_checks.replaced_outputs()
    if note and code == 0:
        print(note)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Lightning announces its own Ctrl-C handling; main() says it in one line instead.
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_quiet_interrupt_notice)
    # ... and SIGTERM's: SaveOnSigterm says what was saved and how to resume.
    logging.getLogger("lightning.pytorch.trainer.connectors.signal_connector").addFilter(_quiet_interrupt_notice)
    quiet_known_noise()  # Lightning's and torch's warnings that name nothing a user can change
    debug = os.environ.get("BIOMOE_DEBUG") == "1"
    if "--debug" in argv:
        argv.remove("--debug")
        debug = True
    verbose_warnings = os.environ.get(VERBOSE_ENV) == "1"
    if VERBOSE_OPTION in argv:
        argv.remove(VERBOSE_OPTION)
        verbose_warnings = True
    argv = expand_recipe_names(argv)  # --config genome: the packaged recipe of that name
    trust = TRUST_OPTION in argv and argv[0] not in EXTRA_COMMANDS  # LightningCLI does not know it
    if trust:
        argv.remove(TRUST_OPTION)
    shown = warnings.showwarning
    lines = WarningLines(verbose=verbose_warnings)  # biomoe's own: one line each, repeats of a kind counted
    warnings.showwarning = functools.partial(_show_warning, lines=lines, fallback=shown)
    try:
        # inputs registered by this command only; the trust decision too (its own commands set it in checkpoint_of)
        with output_checks.input_scope(), trusting(trust or trusted()):
            if argv in (["--help"], ["-h"]):  # the list of commands needs neither Lightning nor torch
                print(command_list_help(), end="")
                raise SystemExit(0)
            if argv and argv[0] in EXTRA_COMMANDS:
                module_name, func_name = EXTRA_COMMANDS[argv[0]].split(":")
                # Each command's module is imported only when it runs: ``--help`` stays quick.
                module = importlib.import_module(module_name)
                code = int(getattr(module, func_name)(argv[1:]) or 0)
                _say_replaced(code)
                return code
            if argv[:1] and argv[0] in LIGHTNING_COMMANDS and help_cache.is_help_request(argv):
                _lightning_help(argv)
            argv = checkpoint_first(argv)  # validate CKPT: --ckpt_path CKPT
            # Lightning and torch are imported only for the commands that need them (start-up time).
            from biomoe.cli.lightning_cli import run_lightning_cli
            from biomoe.cli.run.config_checks import check_config_files

            check_config_files(argv)
            run_lightning_cli(argv)
            _say_replaced(0)
        return 0
    except ArgumentError as err:  # jsonargparse: wrong key or type (exit_on_error=False)
        if debug:
            raise
        print(f"biomoe: error: {summarize_argument_error(str(err))} (see --help)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if debug:
            raise
        return _interrupted()
    except SystemExit as exc:  # Lightning ends fit with sys.exit(1) after handling Ctrl-C itself
        if isinstance(exc.__context__, KeyboardInterrupt) and not debug:
            return _interrupted()
        if type(exc).__name__ == "SIGTERMException":  # Lightning's, after SaveOnSigterm saved last.ckpt
            return 143  # 128 + SIGTERM: what a scheduler and a shell expect of a job it stopped
        raise
    except Exception as err:
        found = None if debug else classify(err)
        if found is None:
            raise  # a bug, not the user's input: keep the traceback
        # a deliberate Ctrl-C is the user's stop, not an error
        print(f"biomoe: {'' if found.exit_code == 130 else 'error: '}{found.message}", file=sys.stderr)
        return found.exit_code
    finally:
        warnings.showwarning = shown
        lines.finish()


def command_list_help() -> str:
    """``cli.py --help``: the options LightningCLI's parser has above its subcommands, then every
    subcommand with its line from the command table (:mod:`biomoe.cli.commands`)."""
    usage = f"%(prog)s [-h] [-c CONFIG] [--print_config [=flags]]\n       {{{','.join(COMMANDS)}}} ..."
    parser = argparse.ArgumentParser(usage=usage, description=DESCRIPTION, add_help=False)
    parser.add_argument("-h", "--help", action="help", help="Show this help message and exit.")
    parser.add_argument("-c", "--config", help="Path to a configuration file in json or yaml format.")
    parser.add_argument("--print_config", metavar="=flags", nargs="?",
                        help="Print the configuration after applying all other arguments and exit. The optional "
                             "flags customizes the output and are one or more keywords separated by comma. The "
                             "supported flags are: skip_default, skip_unset.")
    subcommands = parser.add_subparsers(title="subcommands", description="For more details of each subcommand, "
                                        "add it as an argument followed by --help.", metavar="Available subcommands:",
                                        help="(required)")
    for name, command in COMMANDS.items():
        subcommands.add_parser(name, help=command.summary, add_help=False)
    return parser.format_help()


def _lightning_help(argv: list[str]) -> None:
    """``fit --help`` and its kin: the stored text when the installed code has not changed
    (:mod:`biomoe.cli.help_cache`), else LightningCLI's, kept for next time. Ends in SystemExit.

    Almost all of a first ``--help`` is importing Lightning (seconds); building one parser once it
    is imported takes a fraction of a second, so a miss stores the other Lightning commands' help
    too and every later ``--help`` is instant."""
    text = help_cache.cached_help(argv)
    if text is not None:
        sys.stdout.write(text)
        raise SystemExit(0)
    text = _render_lightning_help(argv)
    sys.stdout.write(text)
    sys.stdout.flush()
    warm_help_cache(exclude=argv[0])
    raise SystemExit(0)


def _render_lightning_help(argv: list[str]) -> str:
    """LightningCLI's help text for ``argv`` (``<command> --help``), kept in the help cache."""
    from biomoe.cli.lightning_cli import run_lightning_cli

    kept = io.StringIO()
    try:
        with contextlib.redirect_stdout(kept):
            run_lightning_cli(argv)
    except BaseException as error:
        # argparse ends a help request with SystemExit(0); any other end is a failed request, and
        # what it printed is not kept from the user
        if not (isinstance(error, SystemExit) and error.code in (0, None)):
            sys.stdout.write(kept.getvalue())
            raise
    help_cache.store_help(argv, kept.getvalue())
    return kept.getvalue()


def warm_help_cache(exclude: str | None = None) -> None:
    """Store the help of every Lightning command not yet in the cache (``make install`` calls this,
    so that even the first ``fit --help`` after installing is instant)."""
    if help_cache.cache_folder() is None:
        return
    for command in LIGHTNING_COMMANDS:
        argv = [command, "--help"]
        if command != exclude and help_cache.cached_help(argv) is None:
            _render_lightning_help(argv)


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _show_warning(message, category, filename, lineno, file=None, line=None, *, lines: WarningLines,
                  fallback) -> None:
    """``biomoe: warning: <message>`` for warnings raised in biomoe (they name the file or key
    themselves; repeats of one kind are counted, :mod:`biomoe.cli.warning_lines`); the usual
    file:line format for everyone else's."""
    if issubclass(category, UserWarning) and os.path.abspath(filename).startswith(_PACKAGE + os.sep):
        lines.show(str(message), file)
    else:
        fallback(message, category, filename, lineno, file, line)


def _quiet_interrupt_notice(record: logging.LogRecord) -> bool:
    message = record.getMessage()
    return "Detected KeyboardInterrupt" not in message and "Received SIGTERM" not in message


def _interrupted() -> int:
    """Ctrl-C: one line and the shell's status for SIGINT; the user's stop, so not worded as an
    error. Outputs are written atomically, so every one that completed is intact; a write that
    was cut off left no file behind."""
    from biomoe.training.guards.stop_report import take_line  # what the interrupted fit saved, if one ran

    print(f"biomoe: {take_line() or INTERRUPTED}", file=sys.stderr)
    return 130


_ARG_NOISE = ("Does not validate against", "Subtypes:", "Errors:", "Given value", "tip:",
              "Expected a <class 'NoneType'>", "Problem with given class_path")


def summarize_argument_error(message: str) -> str:
    """One line from jsonargparse's nested report: the full key and the innermost complaints.

    ``Parser key "model.config": ... Parser key "top_k": Expected a <class 'int'>. Got value: abc``
    becomes ``model.config.top_k: Expected a <class 'int'>. Got value: abc``; union/subtype
    bookkeeping lines are dropped. Unknown shapes fall back to the whole message on one line.
    """
    keys: list[str] = []
    problems: list[str] = []
    for raw in message.splitlines():
        line = raw.strip().lstrip("- ").strip()
        if not line or line.startswith(_ARG_NOISE):
            continue
        if line.startswith('Parser key "') and line.endswith('":'):
            keys.append(line[len('Parser key "'):-2])
        else:
            problems.append(line)
    if not problems:
        return " ".join(message.split())
    choices = [re.fullmatch(r"Expected a typing\.Literal\[(.*)\]\.?", p) for p in problems]
    if all(choices):  # a Literal union (e.g. trainer.precision): list the accepted values once
        values = [v.strip().strip("'") for m in choices for v in m.group(1).split(",")]
        problems = [f"must be one of {', '.join(dict.fromkeys(values))}"]
    text = "; ".join(dict.fromkeys(problems))
    return f"{'.'.join(keys)}: {text}" if keys else text


if __name__ == "__main__":
    sys.exit(main())
