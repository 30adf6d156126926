"""biomoe's side of the inference rows: the real subcommands, each run as a user runs it and timed.

Each run is ``python cli.py ...`` in a fresh process with the command line a user would type (or,
as a diagnostic, :func:`biomoe.cli.main.main` in this process), so the wall time covers what the
user waits for: starting Python and importing what the command needs, verifying and loading the
checkpoint, reading the genome, the forward passes and writing the output file. The options given
are only those the command's parser accepts (read from its ``--help``), so the rows run against any version of the
commands; what was passed is kept in each run's record.
"""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

__all__ = ["CommandRun", "accepted_options", "build_argv", "exit_error", "parse_report", "run_command"]

CLI = Path(__file__).resolve().parents[1] / "cli.py"
"""The command line users run (``python cli.py``), for commands timed in a fresh process."""

_OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
_REPORT = re.compile(r"(?P<verb>scored|embedded|generated)\s+(?P<n>[\d,]+)\s+(?:bases|variants)\s+"
                     r"in\s+(?P<t>[\d.]+)\s*s(?P<rest>[^\n]*)")
_FIRST = re.compile(r"first (?:batch|step) (?P<n>[\d,]+) \S+ in (?P<t>[\d.]+) s")
_STEPS = re.compile(r"(?P<steps>[\d,.]+)\s+steps/s(?P<whole> over the whole run)?")


@lru_cache(maxsize=None)
def accepted_options(command: str) -> frozenset[str]:
    """The ``--options`` of ``cli.py COMMAND``, read from its ``--help`` text."""
    from biomoe.cli.main import main  # the CLI imports Lightning: only when an inference row runs

    text = io.StringIO()
    with contextlib.redirect_stdout(text), contextlib.redirect_stderr(io.StringIO()):
        try:
            main([command, "--help"])
        except SystemExit:
            pass
    return frozenset(_OPTION.findall(text.getvalue())) - {"--help"}


def build_argv(command: str, positionals: list[str], required: dict[str, object],
               optional: dict[str, object | None]) -> tuple[list[str], list[str]]:
    """``[command, *positionals, --key value ...]``: every ``required`` option, and those of
    ``optional`` that the command accepts (a value of True is a flag, None leaves it out).
    Returns the argv and the optional options the command does not have."""
    accepted = accepted_options(command)
    argv = [command, *positionals]
    missing = []
    for key, value in {**required, **optional}.items():
        if value is None or value is False:
            continue
        if key in optional and key not in accepted:
            missing.append(key)
            continue
        argv += [key] if value is True else [key, str(value)]
    return argv, missing


@dataclass
class Report:
    """What a command says about its own timing on stderr, e.g. ``generated 128,000 bases in 3.20 s:
    45,000 bases/s, 700 steps/s after the first step (first step 128 bases in 0.40 s, includes
    warm-up; 40,000 bases/s, 625 steps/s over the whole run)``, or in the older shape
    ``generated 128,000 bases in 3.20 s (40,000 bases/s, 625 steps/s)``. ``seconds`` and
    ``steps_per_s`` are the whole run's; ``first_*`` the first batch's (None: one batch, or a
    command that does not time it apart)."""

    bases: int
    seconds: float
    steps_per_s: float | None = None
    first_bases: int | None = None
    first_seconds: float | None = None


def parse_report(stderr: str) -> Report | None:
    """The last timing line of a command's stderr, None when it prints none."""
    found = list(_REPORT.finditer(stderr))
    if not found:
        return None
    match = found[-1]
    rest = match.group("rest")
    rates = list(_STEPS.finditer(rest))
    whole = next((m for m in rates if m.group("whole")), rates[0] if rates else None)  # not the steady one
    first = _FIRST.search(rest)
    return Report(int(match.group("n").replace(",", "")), float(match.group("t")),
                  float(whole.group("steps").replace(",", "")) if whole else None,
                  int(first.group("n").replace(",", "")) if first else None,
                  float(first.group("t")) if first else None)


@dataclass
class CommandRun:
    argv: list[str]
    seconds: float
    exit_code: int
    stdout: str
    stderr: str
    report: Report | None = None
    kernels: str | None = None
    details: dict = field(default_factory=dict)


def exit_error(what: str, code: int, stderr: str) -> RuntimeError:
    """A timed run that failed: what ran, its exit status and its last stderr lines."""
    tail = " | ".join(stderr.strip().splitlines()[-3:])
    return RuntimeError(f"{what} exited with {code}: {tail[-400:]}")


def run_command(argv: list[str], synchronize=None, fresh: bool = False) -> CommandRun:
    """Run ``cli.py ARGV``; stdout and stderr are captured, not shown. ``fresh``: as a user runs it,
    ``python cli.py ARGV`` in a new process, timed from its start to its exit (interpreter, imports,
    load, work, output file); otherwise in this process (a diagnostic of the steady state). A
    non-zero exit status raises RuntimeError with the command's last stderr lines."""
    if fresh:
        started = time.perf_counter()
        done = subprocess.run([sys.executable, str(CLI), *map(str, argv)], capture_output=True, text=True,
                              cwd=CLI.parent)
        seconds = time.perf_counter() - started
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    else:
        from biomoe.cli.main import main  # the CLI imports Lightning: only when an inference row runs

        out, err = io.StringIO(), io.StringIO()
        started = time.perf_counter()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = int(main(list(argv)) or 0)
            except SystemExit as exc:  # argparse errors
                code = exc.code if isinstance(exc.code, int) else 2
        if synchronize is not None:
            synchronize()
        seconds = time.perf_counter() - started
        stdout, stderr = out.getvalue(), err.getvalue()
    if code != 0:
        raise exit_error(f"cli.py {' '.join(argv[:1])}", code, stderr)
    kernels = next((line.strip() for line in stdout.splitlines() if line.startswith("biomoe kernels")), None)
    return CommandRun(list(argv), seconds, code, stdout, stderr, parse_report(stderr), kernels)
