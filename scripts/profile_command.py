"""Where a use command's GPU time goes: any ``cli.py`` command but ``fit`` under ``torch.profiler``.

    python scripts/profile_command.py --out score.txt -- score-fasta run/best.ckpt genome.fa --out scores

Runs the command in this process, recorded from start to end, and writes its CUDA kernels to
``--out`` as the table ``scripts/profile_fit.py`` writes (per kind and per kernel, milliseconds
over the whole command), with the command's wall time. The first batch's one-time work (kernel
selection, allocator growth) is inside it, so profile an input of many batches.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="the kernel table's file")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then cli.py's arguments (score-fasta ...)")
    args = parser.parse_args()
    command = [a for a in args.command if a != "--"] if args.command[:1] == ["--"] else args.command
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from profile_fit import kernel_table

    from biomoe.cli import main as cli_main

    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    started = time.perf_counter()
    with torch.profiler.profile(activities=activities) as prof:
        code = cli_main(command)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    text = kernel_table(prof, time.perf_counter() - started, 1, "command")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print("\n".join(text.splitlines()[:14]), file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
