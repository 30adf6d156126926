"""Where a training step's GPU time goes: ``cli.py fit`` with a profiler around a few steps.

    python scripts/profile_fit.py --out step-profile.txt --start 30 --steps 5 -- \
        fit --config configs/corpus-study.yaml --data.fasta data/large/corpus.store

Runs the real command in this process with one callback added: steps ``start .. start+steps`` are
recorded by ``torch.profiler`` and their CUDA kernels are written to ``--out`` as a table (self
device time per kernel, and per kind of kernel: GEMM, attention, copies, scatter/gather, sort,
optimizer, other), with the wall time per step on the host clock. Training goes on after the
profiled steps, so the profile is of ordinary steps, not of the first ones.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

import lightning as L
import torch

KINDS: list[tuple[str, str]] = [
    ("attention", r"flash|fmha|attention|sdpa|cudnn.*(fprop|dgrad)"),
    ("gemm", r"gemm|cutlass|sm90_xmma|nvjet|s\d+gemm|matmul|grouped"),
    ("optimizer", r"multi_tensor|adam|foreach"),
    ("sort", r"sort|radix|scan"),
    ("scatter/gather", r"index|scatter|gather|embedding"),
    ("reduce", r"reduce|norm|softmax|logsumexp|topk|cross_entropy|nll"),
    ("copy/cast", r"copy|cast|fill|memset|memcpy|cat"),
    ("elementwise", r"elementwise|vectorized|unrolled|triton"),
]


def kernel_kind(name: str) -> str:
    lowered = name.lower()
    for kind, pattern in KINDS:
        if re.search(pattern, lowered):
            return kind
    return "other"


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class StepProfiler(L.Callback):
    """Profiles optimizer steps ``start .. start + steps`` and writes the kernel table to ``out``."""

    def __init__(self, out: str, start: int = 30, steps: int = 5) -> None:
        self.out, self.start, self.steps = Path(out), start, steps
        self._prof: torch.profiler.profile | None = None
        self._t0 = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.start and self._prof is None:
            _sync()
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self._prof = torch.profiler.profile(activities=activities)
            self._prof.__enter__()
            self._t0 = time.perf_counter()
        elif trainer.global_step == self.start + self.steps and self._prof is not None:
            _sync()
            wall = (time.perf_counter() - self._t0) / self.steps
            self._prof.__exit__(None, None, None)
            self._write(self._prof, wall, trainer)
            self._prof = None
            self.start = -1  # once

    def _write(self, prof: torch.profiler.profile, wall: float, trainer) -> None:
        text = kernel_table(prof, wall, self.steps, "step")
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(text)
        print("\n".join(text.splitlines()[:14]), file=sys.stderr, flush=True)


def kernel_table(prof: torch.profiler.profile, wall: float, units: int, unit: str) -> str:
    """The profile's CUDA kernels as text: milliseconds per ``unit`` by kind, then by kernel, then
    torch's operator table; ``wall`` is host seconds per unit."""
    per_kernel: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            per_kernel[event.name] += event.self_device_time_total
            calls[event.name] += 1
    total = max(sum(per_kernel.values()), 1e-9)
    per_kind: dict[str, float] = defaultdict(float)
    for name, us in per_kernel.items():
        per_kind[kernel_kind(name)] += us
    lines = [f"wall per {unit} {wall * 1e3:.2f} ms; GPU kernel time per {unit} {total / units / 1e3:.2f} ms "
             f"({len(per_kernel)} kernels, {sum(calls.values()) // units} launches per {unit})", "",
             f"kind  ms/{unit}  share"]
    for kind, us in sorted(per_kind.items(), key=lambda kv: -kv[1]):
        lines.append(f"{kind:15s} {us / units / 1e3:8.2f} {us / total:6.1%}")
    lines += ["", f"ms/{unit}  calls/{unit}  share  kind  kernel"]
    for name, us in sorted(per_kernel.items(), key=lambda kv: -kv[1])[:60]:
        lines.append(f"{us / units / 1e3:8.3f} {calls[name] / units:6.0f} {us / total:6.1%} "
                     f"{kernel_kind(name):14s} {name[:150]}")
    ops = prof.key_averages().table(sort_by="self_device_time_total", row_limit=40, max_name_column_width=60)
    return "\n".join(lines) + "\n\nOperators (all profiled):\n" + ops + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="the kernel table's file")
    parser.add_argument("--start", type=int, default=30, help="first profiled optimizer step")
    parser.add_argument("--steps", type=int, default=5, help="profiled steps")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then cli.py's arguments (fit ...)")
    args = parser.parse_args()
    command = [a for a in args.command if a != "--"] if args.command[:1] == ["--"] else args.command
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from biomoe.cli import main as cli_main

    callback = ["--trainer.callbacks+=profile_fit.StepProfiler", f"--trainer.callbacks.out={args.out}",
                f"--trainer.callbacks.start={args.start}", f"--trainer.callbacks.steps={args.steps}"]
    return cli_main(command + callback)


if __name__ == "__main__":
    sys.exit(main())
