"""The long study: every contender alone on the GPU, one after another, resumable across calls.

``python -m bench.experts run`` trains the contenders side by side, which measures tokens but not
what each costs alone. Here each is a ``cli.py fit`` of the corpus-study recipe with the whole
schedule (``--steps``), run alone; its training GPU time is the fit's own ``train/seconds``. A
session that can hold a machine for less than the whole study runs the same command again: a
contender that finished (``done.json``) is skipped, one that was stopped resumes from its
``last.ckpt`` (``--ckpt_path last``, which also starts a contender that has none), and the next
starts when it ends. ``--deadline`` stops the fit in flight with SIGTERM (it finishes its step,
writes ``last.ckpt`` and exits 143) so the call ends in time, and no contender starts with less
than ``--min-start`` seconds left.

    python -m bench.experts study --data subset.store --variants dense,moe,fine --steps 7600 \\
        --evaluations 19 --out /tmp/study --deadline 560
    python -m bench.experts report /tmp/study --out results/experts/study
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from biomoe.files import write_text

from bench.expert_contenders import contender_args

DONE = "done.json"
PARTS = "parts.json"


def study(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    out = Path(args.out)
    for size in args.sizes.split(","):
        for variant in args.variants.split(","):
            name = f"{size}-{variant}"
            run_dir = out / name
            if (run_dir / DONE).exists():
                print(f"{name}: done before", file=sys.stderr, flush=True)
                continue
            left = args.deadline - (time.perf_counter() - started) if args.deadline else None
            if left is not None and left < args.min_start:
                print(f"{name}: not started ({left:.0f} s left); run the same command again", file=sys.stderr,
                      flush=True)
                return 0
            code = _run_one(size, variant, run_dir, args, started)
            if code == 143:
                print(f"{name}: stopped at the deadline with last.ckpt; run the same command again to resume",
                      file=sys.stderr, flush=True)
                return 0
            if code != 0:
                print(f"{name}: exit {code} (see {run_dir / 'fit.log'})", file=sys.stderr, flush=True)
                return 1
    return 0


def _run_one(size: str, variant: str, run_dir: Path, args: argparse.Namespace, started: float) -> int:
    name = run_dir.name
    cmd = contender_args(size, variant, args.data, args.steps, args.evaluations, run_dir, list(args.extra))
    cmd += ["--ckpt_path", "last"]  # resumes this contender's own last.ckpt; trains from step 0 without one
    run_dir.mkdir(parents=True, exist_ok=True)
    write_text(run_dir / "command.txt", " ".join(cmd[1:]) + "\n")
    parts = json.loads((run_dir / PARTS).read_text()) if (run_dir / PARTS).exists() else []
    part = len(parts)
    print(f"{name}: {'resuming' if part else 'starting'} (part {part + 1})", file=sys.stderr, flush=True)
    begun = time.perf_counter()
    with (run_dir / f"fit-{part}.log").open("w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            if args.deadline and time.perf_counter() - started > args.deadline:
                proc.send_signal(signal.SIGTERM)  # the fit ends its step, writes last.ckpt, exits 143
                break
            time.sleep(1.0)
        code = proc.wait()
    parts.append({"wall_s": round(time.perf_counter() - begun, 1), "exit": code})
    write_text(run_dir / PARTS, json.dumps(parts, indent=1) + "\n")
    # the report's wall column: every part of the contender, start-ups and validations included
    write_text(run_dir / "wall.json", json.dumps({"wall_s": sum(p["wall_s"] for p in parts), "exit": code,
                                                  "parts": len(parts)}) + "\n")
    if code == 0:
        write_text(run_dir / DONE, json.dumps({"parts": len(parts)}) + "\n")
    print(f"{name}: exit {code} after {parts[-1]['wall_s']:.0f} s", file=sys.stderr, flush=True)
    return code


def add_parser(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("study", help="every size x variant alone, one after another, resumable across calls")
    s.add_argument("--data", required=True, help="the prepared store (or FASTA folder) to train and validate on")
    s.add_argument("--sizes", default="base")
    s.add_argument("--variants", default="dense,moe,fine")
    s.add_argument("--steps", type=int, required=True, help="the whole schedule of every contender")
    s.add_argument("--evaluations", type=int, default=16, help="validations over the schedule (the curve's points)")
    s.add_argument("--out", required=True)
    s.add_argument("--deadline", type=float, default=0.0,
                   help="seconds after which the fit in flight is stopped with its last.ckpt (0: none)")
    s.add_argument("--min-start", type=float, default=90.0,
                   help="seconds that must be left to start a contender (start-up and compilation)")
    s.add_argument("extra", nargs="*", help="more cli.py fit options for every contender (after --)")
