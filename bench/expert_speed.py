"""What an MoE step costs against its dense twin: each model alone on the GPU, as users train.

Every contender is a fresh ``cli.py fit`` process of ``configs/corpus-study.yaml`` on the given
store with only the model changed (the variants of :func:`bench.expert_contenders.variant_settings`,
at equal active parameters), run **alone**; rounds interleave the contenders so that drift of the
machine falls on all of them. A run trains ``--steps`` steps with no validation; its tokens/s is
the median of the rates the fit itself logs after the first half of its steps (compilation and
warm-up excluded), its peak memory the allocator's high-water mark the fit logs. MFU counts
``6 · active parameters · tokens + 6 · layers · hidden · sequence · tokens`` (matmuls forward and
backward, causal attention scores and values counted whole) against the GPU's bf16 dense peak.

    python -m bench.experts speed --data subset.store --sizes base,4x \\
        --variants dense,moe,fine,fine64 --kernels default,torch,te --rounds 3 --out results/experts/speed
    python -m bench.experts speed --merge a/speed.json b/speed.json --out results/experts/speed

Beside the table (``speed.md``, ``speed.json``) it draws ``speed.png``: tokens/s of every row with
its range and its ratio to the dense model. ``--merge`` writes one table (and picture) from benches
that each ran part of the rows on one kind of GPU (a GPU booked for short slots runs a few rows
at a time).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from biomoe.files import save_figure, write_text

from bench.expert_contenders import contender_args
from bench.timing import datasheet_peak_tflops

LAYERS_ON_TORCH = ["--model.runtime.norm_backend", "torch", "--model.runtime.attention_backend", "torch",
                   "--model.runtime.router_backend", "torch", "--model.runtime.dispatch_backend", "torch"]
TORCH_KERNELS = LAYERS_ON_TORCH + ["--model.runtime.expert_backend", "grouped"]
TE_KERNELS = [arg.replace("torch", "te") for arg in LAYERS_ON_TORCH] + ["--model.runtime.expert_backend", "grouped"]
"""``torch`` / ``te`` kernels: every layer component (norm, attention, router, dispatch) on torch /
on Transformer Engine, the experts on torch's grouped GEMM either way. ``default`` = the product's
choice for the recipe (``auto``: torch's layers for its compiled bf16 blocks, quack's experts where
they run)."""
QUACK_KERNELS = LAYERS_ON_TORCH + ["--model.runtime.expert_backend", "quack"]
"""``quack``: torch's layers with quack-kernels' grouped GEMMs for the experts (a dense model has none,
so its ``quack`` row is its ``torch`` row)."""
KERNEL_ARGS = {"default": [], "torch": TORCH_KERNELS, "te": TE_KERNELS, "quack": QUACK_KERNELS}

def flops_per_token(model: dict, seq_length: int) -> float:
    """Training FLOPs per token: 6 · active parameters + 6 · layers · hidden · sequence (attention)."""
    from biomoe.model.config import ModelConfig

    cfg = ModelConfig(**{k: v for k, v in model.items() if k in ModelConfig.__dataclass_fields__})
    return 6.0 * cfg.active_params_per_token() + 6.0 * cfg.num_layers * cfg.hidden_size * seq_length


def read_run(run_dir: Path) -> dict:
    """tokens/s (median of the second half of the logged rates), peak memory, the model config."""
    import yaml

    metrics = sorted(run_dir.glob("version_*/metrics.csv"))
    if not metrics:
        raise RuntimeError(f"{run_dir}: no metrics.csv (see {run_dir / 'fit.log'})")
    rows = list(csv.DictReader(metrics[-1].open()))
    rates = [(int(r["step"]), float(r["train/tokens_per_s"])) for r in rows if r.get("train/tokens_per_s")]
    last_step = max(s for s, _ in rates)
    steady = [v for s, v in rates if s > last_step / 2] or [v for _, v in rates]
    peaks = [float(r["train/peak_memory_gib"]) for r in rows if r.get("train/peak_memory_gib")]
    config = yaml.safe_load(sorted(run_dir.glob("version_*/config.yaml"))[-1].read_text())
    return {"tokens_per_s": statistics.median(steady), "peak_memory_gib": max(peaks) if peaks else None,
            "model": config["model"]["config"], "seq_length": int(config["data"]["seq_length"])}


def speed(args: argparse.Namespace) -> int:
    out, runs = Path(args.out), Path(args.runs)
    if args.merge:
        results, args.machine, commands, args.steps = merged_results([Path(p) for p in args.merge])
        args.command = args.command or "\n".join(commands)  # the benches that measured the rows
        print(_write(args, out, results))
        return 0
    if not args.data:
        raise SystemExit("biomoe: error: --data: the store to train on is required (or --merge)")
    unknown = set(args.kernels.split(",")) - set(KERNEL_ARGS)
    if unknown:
        raise SystemExit(f"biomoe: error: --kernels: unknown {', '.join(sorted(unknown))} "
                         f"(known: {', '.join(KERNEL_ARGS)})")
    contenders = [(size, variant, kernels) for size in args.sizes.split(",") for kernels in args.kernels.split(",")
                  for variant in args.variants.split(",")
                  if not (variant == "dense" and kernels == "quack")]  # no experts: its torch row
    results: dict[str, dict] = {}
    text = ""
    for round_ in range(args.rounds):
        for size, variant, kernels in contenders:
            name = f"{size}-{variant}-{kernels}"
            run_dir = runs / f"{name}-r{round_}"
            cmd = contender_args(size, variant, args.data, args.steps, 1, run_dir, [])
            cmd += ["--trainer.limit_val_batches", "0", "--trainer.val_check_interval", str(10 * args.steps),
                    "--trainer.log_every_n_steps", str(args.log_every)]
            cmd += KERNEL_ARGS[kernels] + list(args.extra)
            run_dir.mkdir(parents=True, exist_ok=True)
            started = time.perf_counter()
            with (run_dir / "fit.log").open("w") as log:
                code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
            entry = results.setdefault(name, {"size": size, "variant": variant, "kernels": kernels,
                                              "command": " ".join(["python"] + cmd[1:]), "runs": []})
            if code != 0:
                print(f"{name} round {round_ + 1}: exit {code} (see {run_dir / 'fit.log'})", file=sys.stderr,
                      flush=True)
                entry["runs"].append({"exit": code})
                continue
            run = read_run(run_dir)
            run["wall_s"] = time.perf_counter() - started
            entry["runs"].append(run)
            print(f"{name} round {round_ + 1}: {run['tokens_per_s'] / 1e3:.0f}k tokens/s, "
                  f"peak {run['peak_memory_gib'] or 0:.1f} GiB, {run['wall_s']:.0f} s", file=sys.stderr, flush=True)
            text = _write(args, out, results)  # after every run: a stopped bench keeps what it measured
    print(text)
    return 0


def merged_results(paths: list[Path]) -> tuple[dict[str, dict], str, list[str], list[int]]:
    """(rows, GPU, commands, steps per fit) of several ``speed.json`` files (benches that each ran part
    of the rows on one machine kind, or tables merged before) as one result set; refuses files from
    different GPUs, whose rates do not compare."""
    results: dict[str, dict] = {}
    machines, commands, steps = set(), [], set()
    for path in paths:
        try:
            data = json.loads(path.read_text())
            machines.add(data["machine"])
            commands.append(data["command"])
            counts = data.get("steps")  # one bench's step count, or the list of a merged table
            steps.update(counts if isinstance(counts, list) else [] if counts is None else [counts])
            for row in data["contenders"]:
                entry = results.setdefault(row["name"], {k: row[k] for k in ("size", "variant", "kernels", "command")}
                                           | {"runs": []})
                entry["runs"] += row["runs"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise SystemExit(f"biomoe: error: {path}: not a speed.json ({error})") from None
    if len(machines) > 1:
        raise SystemExit(f"biomoe: error: --merge: the files come from different GPUs ({', '.join(sorted(machines))})")
    return results, machines.pop() if machines else "", commands, sorted(steps)


def _write(args: argparse.Namespace, out: Path, results: dict[str, dict]) -> str:
    gpu = args.machine or _gpu_name()
    table = summarise(results, gpu)
    command = args.command or " ".join(["python -m bench.experts speed"] + sys.argv[2:])
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "speed.json", json.dumps({"command": command, "machine": gpu, "steps": args.steps,
                                               "contenders": table}, indent=1) + "\n")
    picture = speed_plot(table, gpu, out / "speed.png")
    text = speed_markdown(table, gpu, command, picture.name if picture else None)
    write_text(out / "speed.md", text)
    return text


def summarise(results: dict[str, dict], gpu: str) -> list[dict]:
    """Median and range of each contender's runs, MFU, and the ratio to the dense model of its size and kernels."""
    peak = datasheet_peak_tflops(gpu)
    rows = []
    for name, entry in results.items():
        ok = [r for r in entry["runs"] if "tokens_per_s" in r]
        row = {k: entry[k] for k in ("size", "variant", "kernels", "command")}
        row["name"], row["runs"] = name, entry["runs"]
        if ok:
            rates = [r["tokens_per_s"] for r in ok]
            flops = flops_per_token(ok[0]["model"], ok[0]["seq_length"])
            row.update(tokens_per_s=statistics.median(rates), tokens_per_s_range=[min(rates), max(rates)],
                       tflops=statistics.median(rates) * flops / 1e12,
                       peak_memory_gib=max((r["peak_memory_gib"] or 0) for r in ok))
            row["mfu"] = row["tflops"] / peak if peak else None
        rows.append(row)
    for row in rows:
        # the dense twin on the same kernels; for a kernel set that only changes the experts (quack), on torch's
        dense_kernels = "torch" if row["kernels"] == "quack" else row["kernels"]
        dense = next((r for r in rows if r["variant"] == "dense" and r["size"] == row["size"]
                      and r["kernels"] == dense_kernels and "tokens_per_s" in r), None)
        if dense and "tokens_per_s" in row:
            row["vs_dense"] = row["tokens_per_s"] / dense["tokens_per_s"]
    return rows


def _row_order(row: dict) -> tuple:
    """Sizes small to large, then kernels, then the variants in the study's order."""
    from bench.expert_contenders import SIZES, VARIANTS

    def place(value: str, known: list[str]) -> tuple[int, str]:
        return (known.index(value), "") if value in known else (len(known), value)

    return place(row["size"], list(SIZES)), place(row["kernels"], list(KERNEL_ARGS)), place(row["variant"], VARIANTS)


def speed_markdown(rows: list[dict], gpu: str, command: str, picture: str | None = None) -> str:
    lines = [f"Each model alone on one {gpu}, `cli.py fit` of configs/corpus-study.yaml; median (range) of the "
             "interleaved runs; MFU against the bf16 dense peak.", "",
             "| size | variant | kernels | runs | tokens/s | range | vs dense | TFLOP/s | MFU | peak GiB |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in sorted(rows, key=_row_order):
        if "tokens_per_s" not in r:
            lines.append(f"| {r['size']} | {r['variant']} | {r['kernels']} | 0 | failed | | | | | |")
            continue
        lo, hi = r["tokens_per_s_range"]
        mfu = f"{r['mfu']:.1%}" if r.get("mfu") is not None else "–"
        ratio = f"{r['vs_dense']:.2f}x" if "vs_dense" in r else "–"
        runs = sum("tokens_per_s" in run for run in r["runs"])
        lines.append(f"| {r['size']} | {r['variant']} | {r['kernels']} | {runs} | {r['tokens_per_s'] / 1e3:.0f}k | "
                     f"{lo / 1e3:.0f}k–{hi / 1e3:.0f}k | {ratio} | {r['tflops']:.0f} | {mfu} | "
                     f"{r['peak_memory_gib']:.1f} |")
    if picture:
        lines += ["", f"![tokens/s of every row against its dense twin]({picture})"]
    return "\n".join(lines) + f"\n\n```bash\n{command}\n```\n"


def speed_plot(rows: list[dict], gpu: str, path: Path) -> Path | None:
    """Bars of tokens/s (median, whiskers the range) for every variant, one panel per size, one colour
    per kernel set, each bar labelled with its ratio to the dense model: the premium of the experts
    at a glance. ``None`` (no file) without matplotlib or without a measured row."""
    try:
        import matplotlib
    except ImportError:
        return None
    measured = sorted((r for r in rows if "tokens_per_s" in r), key=_row_order)
    if not measured:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = list(dict.fromkeys(r["size"] for r in measured))
    kernels = list(dict.fromkeys(r["kernels"] for r in sorted(measured, key=lambda r: _row_order(r)[1])))
    width = 0.8 / len(kernels)
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.5 * len(sizes), 3.6), squeeze=False)
    for ax, size in zip(axes[0], sizes):
        here = [r for r in measured if r["size"] == size]
        variants = list(dict.fromkeys(r["variant"] for r in here))
        for k, kernel in enumerate(kernels):
            bars = [(variants.index(r["variant"]), r) for r in here if r["kernels"] == kernel]
            if not bars:
                continue
            xs = [i + (k - (len(kernels) - 1) / 2) * width for i, _ in bars]
            mids = [r["tokens_per_s"] / 1e3 for _, r in bars]
            spans = [[(r["tokens_per_s"] - r["tokens_per_s_range"][0]) / 1e3 for _, r in bars],
                     [(r["tokens_per_s_range"][1] - r["tokens_per_s"]) / 1e3 for _, r in bars]]
            ax.bar(xs, mids, width, yerr=spans, capsize=2, color=f"C{k}", label=f"{kernel} kernels")
            for x, (_, r) in zip(xs, bars):
                if "vs_dense" in r:  # above the whisker
                    ax.text(x, r["tokens_per_s_range"][1] / 1e3, f"{r['vs_dense']:.2f}x", ha="center",
                            va="bottom", fontsize=7)
        ax.set_xticks(range(len(variants)), variants)
        ax.set_title(f"{size}")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("tokens/s (thousands), each model alone")
    handles = {label: handle for ax in axes[0] for handle, label in zip(*ax.get_legend_handles_labels())}
    axes[0][-1].legend(handles.values(), handles.keys(), fontsize=8)  # every kernel set, whichever panel has it
    fig.suptitle(f"MoE step against its dense twin, {gpu}", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


def _gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"


def add_parser(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("speed", help="tokens/s of every size x variant, each alone, interleaved rounds")
    s.add_argument("--data", default="", help="the prepared store (or FASTA folder) to train on")
    s.add_argument("--sizes", default="base")
    s.add_argument("--variants", default="dense,moe,fine,fine64")
    s.add_argument("--kernels", default="default", help="default (the product's choice), torch and/or te")
    s.add_argument("--rounds", type=int, default=3)
    s.add_argument("--steps", type=int, default=150)
    s.add_argument("--log-every", type=int, default=10, help="steps between logged rates")
    s.add_argument("--runs", default="runs/expert-speed", help="where the fits write")
    s.add_argument("--out", required=True)
    s.add_argument("--machine", default="")
    s.add_argument("--command", default="")
    s.add_argument("--merge", nargs="+", default=[], metavar="SPEED_JSON",
                   help="write one table from the runs of earlier speed.json files instead of running")
    s.add_argument("extra", nargs="*", help="more cli.py fit options for every contender (after --)")
