"""Start-up time of the command line: ``cli.py --help`` and every subcommand's ``--help``.

    python scripts/bench_startup.py              # 5 runs of each, median
    python scripts/bench_startup.py -n 3 fit generate
    python scripts/bench_startup.py --root /tmp/other-checkout

Each run is a fresh ``python cli.py ... --help`` subprocess (nothing cached in the interpreter,
the operating system's file cache warm after the first), timed from start to exit. The table
shows the median and the fastest run in seconds and whether torch was imported; the load average
is printed beside it, since on a shared machine it moves the numbers more than anything else.
fit/validate/test/predict keep their help text in a cache (:mod:`biomoe.cli.help_cache`); the
script gives them an empty cache folder of their own, so the ``first s`` column is the run that
builds the text (all four of them: one import of Lightning serves every parser) and the median is
what every later ``--help`` costs; the last row is what ``make install`` spends building them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root, when biomoe is not installed

from biomoe.cli.commands import COMMANDS, LIGHTNING_COMMANDS  # noqa: E402  (the table only: imports nothing heavy)

# Run after the command: were torch / Lightning imported? (``-X importtime`` would slow the run.)
_PROBE = ("import atexit, sys; atexit.register(lambda: sys.__stderr__.write("
          "'\\n@@imported torch=%d lightning=%d\\n' % ('torch' in sys.modules, 'lightning' in sys.modules)))")


def time_once(root: Path, args: list[str], probe: bool = False, env: dict[str, str] | None = None
              ) -> tuple[float, str]:
    """Seconds for one ``python cli.py ARGS`` (exit status 0 expected) and its stderr."""
    code = f"{_PROBE}; import runpy; sys.argv = ['cli.py', *{args!r}]; runpy.run_path('cli.py', run_name='__main__')"
    command = [sys.executable, "-c", code] if probe else [sys.executable, "cli.py", *args]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env=env)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"cli.py {' '.join(args)} exited with {done.returncode}:\n{done.stderr[-2000:]}")
    return seconds, done.stderr


def imported(root: Path, args: list[str], env: dict[str, str]) -> str:
    """Which of torch / Lightning ``cli.py ARGS`` imports (one extra, untimed run)."""
    _, err = time_once(root, args, probe=True, env=env)
    line = next((line for line in err.splitlines() if line.startswith("@@imported")), "")
    names = [name for name in ("torch", "lightning") if f"{name}=1" in line]
    return "+".join(names) or "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commands", nargs="*", help="subcommands to time (default: all; '' is cli.py --help)")
    parser.add_argument("-n", "--repeats", type=int, default=5, help="runs of each (default %(default)s)")
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout whose cli.py is timed")
    args = parser.parse_args(argv)
    commands = args.commands or ["", *COMMANDS]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at start; {args.repeats} runs each")
    print(f"{'command':<28} {'first s':>8} {'median s':>9} {'min s':>7}  imports")
    with tempfile.TemporaryDirectory() as caches:
        for name in commands:
            cli_args = [name, "--help"] if name else ["--help"]
            env = {**os.environ, "XDG_CACHE_HOME": os.path.join(caches, name or "top")}
            times = [time_once(args.root, cli_args, env=env)[0] for _ in range(args.repeats + 1)]
            label = f"cli.py {' '.join(cli_args)}"
            print(f"{label:<28} {times[0]:>8.2f} {statistics.median(times[1:]):>9.2f} {min(times[1:]):>7.2f}  "
                  f"{imported(args.root, cli_args, env)}", flush=True)
        if any(name in LIGHTNING_COMMANDS for name in commands):
            # What `make install` spends so that no user ever waits for the first text.
            env = {**os.environ, "XDG_CACHE_HOME": os.path.join(caches, "install")}
            code = "from biomoe.cli.main import warm_help_cache; warm_help_cache()"
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], cwd=args.root, check=True, env=env)
            print(f"{'make install (all four)':<28} {time.perf_counter() - start:>8.2f}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
