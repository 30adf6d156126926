"""Do two expert backends train the same model? Loss curves of identical fits but for the kernels.

Every contender is ``cli.py fit`` of the study's config with the same seed, data order and schedule;
only the kernels differ (``quack``, ``torch``, ``te``: :data:`bench.expert_speed.KERNEL_ARGS`; a
``-eager`` suffix turns ``model.runtime.compile`` off). They run side by side on one GPU. The first
contender is the reference; bf16 rounds differently in every kernel, so a curve never matches
bit for bit, and the yardstick is a pair that computes the same thing through other fusions: the
reference's kernels with and without ``torch.compile`` (``--noise``). A backend matches when its
deviation from the reference is no larger than :data:`NOISE_FACTOR` times the yardstick's.

    python -m bench.experts match --data data/yeast_chrI.fna.gz --contenders torch,quack,torch-eager \\
        --steps 2000 --runs /tmp/match --out results/experts/quack-loss-match -- --data.val_files '[]'
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from biomoe.files import save_figure, write_text

from bench.expert_contenders import contender_args
from bench.expert_speed import KERNEL_ARGS

NOISE_FACTOR = 1.5
"""How far past the yardstick's deviation a backend may be and still match (two bf16 runs' gaps
themselves vary from run to run)."""

EAGER = "-eager"


def fit_args(contender: str) -> list[str]:
    """The ``cli.py fit`` options of ``contender`` (``kernels`` or ``kernels-eager``)."""
    kernels = contender.removesuffix(EAGER)
    if kernels not in KERNEL_ARGS:
        raise SystemExit(f"biomoe: error: --contenders: unknown kernels '{kernels}' (known: {', '.join(KERNEL_ARGS)}, "
                         f"each optionally with {EAGER})")
    return KERNEL_ARGS[kernels] + (["--model.runtime.compile", "false"] if contender.endswith(EAGER) else [])


def read_losses(run_dir: Path) -> dict[int, float]:
    """``{step: train/loss}`` of the newest version folder of ``run_dir``."""
    metrics = sorted(run_dir.glob("version_*/metrics.csv"))
    if not metrics:
        raise RuntimeError(f"{run_dir}: no metrics.csv (see {run_dir / 'fit.log'})")
    return {int(r["step"]): float(r["train/loss"]) for r in csv.DictReader(metrics[-1].open()) if r.get("train/loss")}


def deviation(curve: dict[int, float], reference: dict[int, float]) -> dict[str, float]:
    """Mean and largest absolute loss gap over the steps both logged, and the mean over the last tenth."""
    steps = sorted(set(curve) & set(reference))
    if not steps:
        raise RuntimeError("no logged step in common")
    gaps = [abs(curve[s] - reference[s]) for s in steps]
    tail = gaps[-max(1, len(gaps) // 10):]
    return {"steps_compared": len(steps), "mean_abs": statistics.fmean(gaps), "max_abs": max(gaps),
            "last_tenth_mean_abs": statistics.fmean(tail)}


def summarise(curves: dict[str, dict[int, float]], reference: str, noise: str | None) -> dict:
    """Every contender's deviation from ``reference`` and, where a yardstick ran, whether it matches."""
    out: dict[str, dict] = {}
    yard = deviation(curves[noise], curves[reference]) if noise in curves else None
    for name, curve in curves.items():
        if name == reference:
            continue
        entry = deviation(curve, curves[reference])
        if yard is not None and name != noise:
            entry["within_noise"] = all(entry[key] <= NOISE_FACTOR * yard[key]
                                        for key in ("mean_abs", "last_tenth_mean_abs"))
        out[name] = entry
    return out


def markdown(result: dict) -> str:
    ref, noise = result["reference"], result["noise"]
    lines = [f"# Loss curves: the same fit on other expert kernels ({result['machine']})", "",
             f"{result['steps']} steps of `{result['size']}-{result['variant']}`, same seed and data order; "
             f"reference `{ref}`, yardstick `{noise}` (the reference's kernels with compile off). A backend "
             f"matches when its mean gap, overall and over the last tenth of the steps, is at most "
             f"{NOISE_FACTOR}x the yardstick's.", "",
             "| contender | final loss | mean gap | largest gap | gap, last tenth | matches |",
             "| --- | ---: | ---: | ---: | ---: | --- |"]
    for name, c in result["contenders"].items():
        d = result["deviations"].get(name)
        final = f"{c['loss'][-1]:.4f}" if c.get("loss") else "—"
        if d is None:
            lines.append(f"| {name} | {final} | (reference) | | | |")
            continue
        verdict = {True: "yes", False: "**no**"}.get(d.get("within_noise"), "(yardstick)")
        lines.append(f"| {name} | {final} | {d['mean_abs']:.4f} | {d['max_abs']:.4f} | "
                     f"{d['last_tenth_mean_abs']:.4f} | {verdict} |")
    lines += ["", "![loss curves](match.png)", "", "```bash", result["command"], "```", ""]
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = result["contenders"][result["reference"]]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5.5), sharex=True, height_ratios=[2, 1])
    for k, (name, c) in enumerate(result["contenders"].items()):
        if not c.get("loss"):
            continue
        top.plot(c["steps"], c["loss"], lw=0.9, color=f"C{k}", label=name)
        if name != result["reference"]:
            at = dict(zip(ref["steps"], ref["loss"]))
            steps = [s for s in c["steps"] if s in at]
            bottom.plot(steps, [abs(v - at[s]) for s, v in zip(c["steps"], c["loss"]) if s in at],
                        lw=0.8, color=f"C{k}", label=f"|{name} − {result['reference']}|")
    top.set_ylabel("training loss")
    top.legend(fontsize=8)
    top.grid(alpha=0.3)
    bottom.set_ylabel("gap")
    bottom.set_xlabel("step")
    bottom.legend(fontsize=7)
    bottom.grid(alpha=0.3)
    fig.suptitle(f"The same fit on other expert kernels, {result['machine']}", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def launch(args: argparse.Namespace, runs: Path) -> dict[str, dict]:
    """Every contender's fit, side by side; each one's exit code and wall time."""
    procs = {}
    for name in args.contenders:
        run_dir = runs / name
        run_dir.mkdir(parents=True, exist_ok=True)
        cmd = contender_args(args.size, args.variant, args.data, args.steps, 1, run_dir, [])
        cmd += ["--trainer.log_every_n_steps", str(args.log_every)] + fit_args(name) + list(args.extra)
        log = (run_dir / "fit.log").open("w")
        procs[name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), time.perf_counter(), cmd)
        print(f"started {name}", file=sys.stderr, flush=True)
    done = {}
    for name, (proc, started, cmd) in procs.items():
        code = proc.wait()
        done[name] = {"exit": code, "wall_s": time.perf_counter() - started,
                      "command": " ".join(["python"] + cmd[1:])}
        print(f"{name}: exit {code} after {done[name]['wall_s']:.0f} s", file=sys.stderr, flush=True)
    return done


def match(args: argparse.Namespace) -> int:
    args.contenders = args.contenders.split(",")
    for name in args.contenders:
        fit_args(name)  # unknown kernels: one line before anything runs
    runs, out = Path(args.runs), Path(args.out)
    launched = {} if args.report_only else launch(args, runs)
    curves, contenders = {}, {}
    for name in args.contenders:
        entry = dict(launched.get(name, {}))
        try:
            curve = read_losses(runs / name)
        except RuntimeError as err:
            print(f"{name}: {err}", file=sys.stderr)
            curve = {}
        entry.update(steps=sorted(curve), loss=[curve[s] for s in sorted(curve)])
        contenders[name] = entry
        if curve:
            curves[name] = curve
    reference = args.contenders[0]
    if reference not in curves:
        raise SystemExit(f"biomoe: error: {runs / reference}: the reference run logged no loss")
    noise = args.noise or reference + EAGER
    result = {"command": args.command or " ".join(["python -m bench.experts match"] + sys.argv[2:]),
              "machine": args.machine or _gpu_name(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "size": args.size, "variant": args.variant,
              "steps": args.steps, "reference": reference, "noise": noise, "noise_factor": NOISE_FACTOR,
              "contenders": contenders, "deviations": summarise(curves, reference, noise if noise in curves else None)}
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "match.json", json.dumps(result, indent=1) + "\n")
    plot(result, out / "match.png")
    text = markdown(result)
    write_text(out / "match.md", text)
    print(text)
    return 0 if all(c.get("exit", 0) == 0 for c in contenders.values()) else 1


def _gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"


def add_parser(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("match", help="loss curves of the same fit on other expert kernels, side by side")
    s.add_argument("--data", required=True, help="the prepared store (or FASTA) to train on")
    s.add_argument("--size", default="base")
    s.add_argument("--variant", default="moe")
    s.add_argument("--contenders", default="torch,quack,torch-eager",
                   help="kernels, the first the reference; a -eager suffix: compile off")
    s.add_argument("--noise", default="", help="the yardstick contender (default: the reference's kernels eager)")
    s.add_argument("--steps", type=int, default=2000)
    s.add_argument("--log-every", type=int, default=10, help="steps between logged losses")
    s.add_argument("--runs", default="runs/expert-match", help="where the fits write")
    s.add_argument("--out", required=True)
    s.add_argument("--report-only", action="store_true", help="read the fits already in --runs")
    s.add_argument("--machine", default="")
    s.add_argument("--command", default="")
    s.add_argument("extra", nargs="*", help="more cli.py fit options for every contender (after --)")
