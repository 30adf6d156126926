"""2-GPU expert-parallel smoke test: train, check the loss falls, resume from the distributed
checkpoint, export one file. Exits non-zero (with the reason) when any step fails.

``python scripts/smoke_2gpu.py [--config configs/smoke-2gpu.yaml] [--steps 80] [--resume-steps 20]``
Extra arguments after ``--`` go to both ``cli.py fit`` runs (e.g. ``--trainer.devices=2``).
"""

from __future__ import annotations

import argparse
import csv
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # biomoe importable without an install


class SmokeFailure(RuntimeError):
    """One failed check; its message is the line printed before exiting with status 1."""


def fit(config: str, max_steps: int, extra: list[str], ckpt: Path | None = None) -> None:
    cmd = [sys.executable, str(ROOT / "cli.py"), "fit", "--config", config,
           f"--trainer.max_steps={max_steps}", *extra]
    if ckpt is not None:
        cmd.append(f"--ckpt_path={ckpt}")
    print("+", " ".join(cmd), flush=True)
    if subprocess.run(cmd, cwd=ROOT).returncode != 0:
        raise SmokeFailure(f"training command failed: {' '.join(cmd)}")


def train_losses(run_dir: Path) -> dict[int, float]:
    """step -> train/loss from the newest CSVLogger version under ``run_dir``."""
    files = sorted(run_dir.glob("version_*/metrics.csv"), key=lambda p: int(p.parent.name.split("_")[1]))
    if not files:
        raise SmokeFailure(f"no metrics.csv under {run_dir}")
    losses = {}
    with files[-1].open() as handle:
        for row in csv.DictReader(handle):
            if row.get("train/loss"):
                losses[int(row["step"])] = float(row["train/loss"])
    if not losses:
        raise SmokeFailure(f"{files[-1]} has no train/loss")
    return losses


def check_falls(losses: dict[int, float], factor: float = 0.85) -> None:
    steps = sorted(losses)
    head = [losses[s] for s in steps[:3]]
    tail = [losses[s] for s in steps[-3:]]
    first, last = sum(head) / len(head), sum(tail) / len(tail)
    print(f"loss: first {first:.4f} (steps {steps[:3]}), last {last:.4f} (steps {steps[-3:]})")
    if not last < factor * first:
        raise SmokeFailure(f"loss did not fall: {first:.4f} -> {last:.4f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/smoke-2gpu.yaml")
    parser.add_argument("--run-dir", default="runs/smoke-2gpu")
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--resume-steps", type=int, default=20)
    args, extra = parser.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    run_dir = ROOT / args.run_dir
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    shutil.rmtree(run_dir, ignore_errors=True)
    try:
        fit(args.config, args.steps, extra)
        first = train_losses(run_dir)
        check_falls(first)
        if not (ckpt.is_dir() and (ckpt / "meta.pt").is_file()):
            raise SmokeFailure(f"{ckpt} is not a distributed checkpoint directory")
        print(f"distributed checkpoint: {ckpt} ({sum(1 for _ in ckpt.iterdir())} files)")

        fit(args.config, args.steps + args.resume_steps, extra, ckpt=ckpt)
        resumed = train_losses(run_dir)
        if min(resumed) <= args.steps - 1 or max(resumed) < args.steps + args.resume_steps - 5:
            raise SmokeFailure(f"resumed run logged steps {min(resumed)}..{max(resumed)}, expected "
                               f"{args.steps}..{args.steps + args.resume_steps - 1}")
        pre = [first[s] for s in sorted(first)[-3:]]
        post = [resumed[s] for s in sorted(resumed)[:3]]
        print(f"resume: last losses before {['%.4f' % x for x in pre]}, first after "
              f"{['%.4f' % x for x in post]} (steps {sorted(resumed)[:3]})")
        if max(post) > 1.15 * max(pre):
            raise SmokeFailure("loss jumped after resume: weights or optimizer state not restored")

        from biomoe.checkpoint.distributed import consolidate

        single = consolidate(ckpt, run_dir / "consolidated.ckpt")
        import torch

        state = torch.load(single, map_location="cpu", weights_only=False)["state_dict"]
        experts = [k for k in state if k.endswith("experts.gate_up_proj")]
        print(f"consolidated: {single} ({len(state)} tensors; {experts[0]} {tuple(state[experts[0]].shape)})")
    except SmokeFailure as err:
        print(f"SMOKE FAILED: {err}", file=sys.stderr)
        return 1
    print("SMOKE OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
