"""Multi-GPU scaling runs: the training CLI itself, under ``ExpertParallelStrategy``, per layout.

Why the CLI and not the single-process bench: scaling is about what a user's ``cli.py fit`` gets
from more GPUs (FSDP2 all-gathers, all-to-all token dispatch, the data pipeline, the logger), so
each point is a real short ``fit`` of a config with only the layout, depth, precision and step
count changed. Weak scaling: every GPU reads its own micro-batch of ``seq_length`` tokens, so the
ideal tokens/s per GPU is the one-GPU figure and scaling efficiency is their ratio.

Throughput is the module's ``train/tokens_per_s`` (global tokens between consecutive logging
steps on the host clock, each end taken after a device sync; the runner logs every step), the
median over the steps after ``--warmup``. Peak memory is rank 0's ``allocated_bytes.all.peak``
from Lightning's ``DeviceStatsMonitor``. Model FLOPs use ``BenchShape.flops_per_step``.

    python -m bench.scaling run --config configs/mixtral-8x7b-ep8.yaml --layers 2 \
        --layouts 1x1,1x2,1x4,2x2 --precisions bf16,fp8-block --out results/scaling/raw
    python -m bench.scaling report results/scaling/raw --out results/scaling
"""

from __future__ import annotations

import argparse
import copy
import csv
import fcntl
import inspect
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import yaml

from bench.report import environment
from bench.shapes import BenchShape
from biomoe.files import atomic_path, write_text
from bench.timing import PEAK_BF16_TFLOPS
from biomoe.model.config import ModelConfig, OptimConfig
from biomoe.backends.te.precision import parse_precision

ROOT = Path(__file__).resolve().parents[1]
PEAK_KEY_SUFFIX = "allocated_bytes.all.peak"


@dataclass(frozen=True)
class Layout:
    """``dp`` data-parallel shards (FSDP2) times ``ep`` expert-parallel ranks = GPUs.

    ``single_device`` (written ``single``) is one GPU under Lightning's default strategy instead
    of ``ExpertParallelStrategy``: beside ``1x1`` it measures what FSDP2 and the strategy cost."""

    dp: int
    ep: int
    single_device: bool = False

    @classmethod
    def parse(cls, text: str) -> "Layout":
        if text.strip().lower() == "single":
            return cls(1, 1, single_device=True)
        try:
            dp, ep = (int(x) for x in text.lower().split("x"))
        except ValueError:
            raise ValueError(f"layout {text!r}: expected DPxEP, e.g. 2x4") from None
        if dp < 1 or ep < 1:
            raise ValueError(f"layout {text!r}: sizes must be positive")
        return cls(dp, ep)

    @property
    def gpus(self) -> int:
        return self.dp * self.ep

    @property
    def label(self) -> str:
        return "single-device" if self.single_device else f"dp{self.dp}xep{self.ep}"


@dataclass
class ScalingResult:
    model: str
    layers: int
    precision: str
    layout: str
    gpus: int
    steps_timed: int
    tokens_per_s: float          # global, median over timed steps
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float
    mfu: float
    peak_mem_gb: float | None
    first_loss: float
    last_loss: float
    wall_s: float
    concurrent: str = ""         # other runs sharing the host at the same time, if any
    efficiency: float | None = None  # per-GPU tokens/s over the 1-GPU run's (same model, precision, AC)
    activation_checkpointing: bool = False  # recomputes blocks: ~1/3 more compute, less memory
    lr_warmup_steps: int | None = None  # the fit's LR warm-up (None: not recorded, older results)
    environment: dict | None = None  # GPU, software and date of the machine that ran the fit (None: older results)


def _data_default(name: str) -> object:
    """``GenomeDataModule``'s default for ``name`` (imported only when needed: it pulls in Lightning)."""
    from biomoe.data.datamodule import GenomeDataModule  # imported here: Lightning, only when needed

    return inspect.signature(GenomeDataModule.__init__).parameters[name].default


def shape_of(cfg: dict) -> BenchShape:
    """The FLOP-counting shape of a CLI config (micro-batch and sequence per GPU). Keys the config
    leaves out take the defaults ``cli.py fit`` trains with, not a KeyError after the fit. A config
    with dense blocks (``moe_layers``) counts its parameters per token as the model does."""
    m = {**{name: getattr(ModelConfig, name) for name in (f.name for f in fields(ModelConfig))},
         **cfg["model"]["config"]}
    data = cfg["data"]
    seq = data["seq_length"] if "seq_length" in data else _data_default("seq_length")
    batch = data["batch_size"] if "batch_size" in data else _data_default("batch_size")
    partly_dense = m.get("moe_layers") is not None
    return BenchShape(name=f"{m['num_layers']}-layer", hidden=m["hidden_size"], ffn=m["ffn_hidden_size"],
                      layers=m["num_layers"], heads=m["num_heads"], kv_heads=m["num_kv_heads"],
                      experts=m["num_experts"], top_k=m["top_k"], seq=seq, micro_batch=batch,
                      vocab=m["vocab_size"],
                      active_params_override=ModelConfig(**m).active_params_per_token() if partly_dense else None)


def point_name(model: str, layers: int, precision: str, layout: Layout,
               activation_checkpointing: bool = False) -> str:
    """File name of one point. Activation checkpointing is part of it: with and without are
    different measurements and must not overwrite each other's result."""
    return f"{model}-{layers}L-{precision}{'-ac' if activation_checkpointing else ''}-{layout.label}"


def scaling_config(base: dict, layout: Layout, precision: str, steps: int, run_dir: Path,
                   layers: int | None = None, fasta: str | None = None,
                   activation_checkpointing: bool | None = None,
                   lr_warmup_steps: int | None = None) -> dict:
    """``base`` with only what a scaling point changes: GPUs, EP size, depth, precision, a short
    fit with per-step logging, no validation and no checkpoint (a 47B checkpoint is hundreds of GB).
    The precision fallback is dropped: a point labelled ``mxfp8`` must not quietly run fp8-block."""
    cfg = copy.deepcopy(base)
    trainer = cfg.setdefault("trainer", {})
    strategy = trainer.get("strategy")
    if not (isinstance(strategy, dict) and str(strategy.get("class_path")).endswith("ExpertParallelStrategy")):
        raise ValueError("scaling runs need trainer.strategy = biomoe.parallel.strategy.ExpertParallelStrategy")
    if layout.single_device:
        trainer.pop("strategy")
    else:
        init = strategy.setdefault("init_args", {})
        init["expert_parallel_size"] = layout.ep
        init["data_parallel_replicate_size"] = 1
        init["data_parallel_shard_size"] = "auto"  # = GPUs, whatever the base config pinned
    trainer.update(devices=layout.gpus, num_nodes=1, max_steps=steps, log_every_n_steps=1,
                   limit_val_batches=0, num_sanity_val_steps=0, enable_checkpointing=False,
                   enable_progress_bar=False, default_root_dir=str(run_dir))
    trainer.pop("val_check_interval", None)
    trainer["logger"] = {"class_path": "lightning.pytorch.loggers.CSVLogger",
                         "init_args": {"save_dir": str(run_dir), "name": ""}}
    trainer["callbacks"] = [c for c in trainer.get("callbacks") or []
                            if not c["class_path"].endswith("ModelCheckpoint")]
    trainer["callbacks"].append({"class_path": "lightning.pytorch.callbacks.DeviceStatsMonitor"})
    model = cfg["model"]
    runtime = model.setdefault("runtime", {})
    runtime["precision"] = precision
    runtime.pop("precision_fallback", None)
    if layers is not None:
        model["config"]["num_layers"] = layers
    if activation_checkpointing is not None:
        runtime["activation_checkpointing"] = activation_checkpointing
    if lr_warmup_steps is not None:
        # The config's own warm-up is the default: a short fit is then the recipe's first steps.
        # Squeezing mixtral-8x7b-ep8's 2,000-step warm-up into steps/5 sent every 2-layer run from
        # loss 2.1 to ~22 at step 2, on every layout and precision, and one-GPU fp8-block to NaN.
        model.setdefault("optim", {})["warmup_steps"] = int(lr_warmup_steps)
    if fasta is not None:
        cfg["data"]["fasta"] = fasta
    return cfg


def _version(path: Path) -> int:
    match = re.fullmatch(r"version_(\d+)", path.parent.name)
    return int(match.group(1)) if match else -1


def read_metrics(run_dir: Path, warmup: int) -> dict:
    """Median global tokens/s after ``warmup`` steps, first/last train loss, rank-0 peak memory,
    from the newest CSVLogger version (by number: ``version_10`` is newer than ``version_9``)."""
    files = sorted(run_dir.glob("version_*/metrics.csv"), key=_version)
    if not files:
        raise FileNotFoundError(f"{run_dir}: no version_*/metrics.csv (did the fit start?)")
    speed, loss, peak = {}, {}, 0.0
    with files[-1].open() as handle:
        for row in csv.DictReader(handle):
            step = int(row["step"]) if row.get("step") else None
            if step is not None and row.get("train/tokens_per_s"):
                speed[step] = float(row["train/tokens_per_s"])
            if step is not None and row.get("train/loss"):
                loss[step] = float(row["train/loss"])
            for key, value in row.items():
                if key.endswith(PEAK_KEY_SUFFIX) and value:
                    peak = max(peak, float(value))
    timed = [v for s, v in speed.items() if s >= warmup]
    if not timed or not loss:
        raise ValueError(f"{files[-1]}: no logged training steps at or after step {warmup} "
                         f"(steps logged: {sorted(speed)[-3:]})")
    return {"tokens_per_s": statistics.median(timed), "steps_timed": len(timed),
            "first_loss": loss[min(loss)], "last_loss": loss[max(loss)],
            "peak_mem_gb": peak / 1e9 if peak else None}


def result_from_metrics(cfg: dict, model: str, precision: str, layout: Layout, metrics: dict,
                        wall_s: float, concurrent: str = "") -> ScalingResult:
    shape = shape_of(cfg)
    per_gpu = metrics["tokens_per_s"] / layout.gpus
    tflops = shape.flops_per_step() / shape.tokens_per_step * per_gpu / 1e12
    return ScalingResult(model=model, layers=shape.layers, precision=precision, layout=layout.label,
                         gpus=layout.gpus, steps_timed=metrics["steps_timed"],
                         tokens_per_s=metrics["tokens_per_s"], tokens_per_s_per_gpu=per_gpu,
                         tflops_per_gpu=tflops, mfu=tflops / PEAK_BF16_TFLOPS,
                         peak_mem_gb=metrics["peak_mem_gb"], first_loss=metrics["first_loss"],
                         last_loss=metrics["last_loss"], wall_s=wall_s, concurrent=concurrent,
                         activation_checkpointing=bool(cfg["model"].get("runtime", {}).get("activation_checkpointing")),
                         lr_warmup_steps=int(cfg["model"].get("optim", {}).get("warmup_steps",
                                                                               OptimConfig.warmup_steps)))


def add_efficiency(results: list[ScalingResult]) -> list[ScalingResult]:
    """Per-GPU tokens/s over the 1-GPU ``dp1xep1`` run (same strategy) of the same model,
    precision and activation checkpointing; None without one. A ``single-device`` row's value is
    then the strategy's cost."""
    single = {(r.model, r.layers, r.precision, r.activation_checkpointing): r.tokens_per_s_per_gpu
              for r in results if r.layout == "dp1xep1"}
    for r in results:
        base = single.get((r.model, r.layers, r.precision, r.activation_checkpointing))
        r.efficiency = r.tokens_per_s_per_gpu / base if base else None
    return results


def markdown(results: list[ScalingResult]) -> str:
    lines = ["| model | precision | layout | GPUs | tokens/s | tokens/s/GPU | TFLOP/s/GPU | MFU | "
             "efficiency vs 1 GPU | peak GB (rank 0) | loss first → last | note |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for r in sorted(results, key=lambda r: (r.model, r.layers, r.precision, r.activation_checkpointing,
                                            r.gpus, r.layout)):
        eff = f"{r.efficiency:.0%}" if r.efficiency is not None else "—"
        mem = f"{r.peak_mem_gb:.1f}" if r.peak_mem_gb is not None else "—"
        lines.append(f"| {r.model} ({r.layers} layers) | {_precision_label(r)} | {r.layout} | {r.gpus} | "
                     f"{r.tokens_per_s:,.0f} | {r.tokens_per_s_per_gpu:,.0f} | {r.tflops_per_gpu:.0f} | "
                     f"{r.mfu:.0%} | {eff} | {mem} | {r.first_loss:.3f} → {r.last_loss:.3f} | "
                     f"{('with ' + r.concurrent) if r.concurrent else ''} |")
    return "\n".join(lines) + "\n"


def run_machines(results: list[ScalingResult]) -> str:
    """The machines that ran the points, from each point's own environment (never the machine
    merging them), one line per distinct machine and software, and how many points record none."""
    counts: dict[str, int] = {}
    for r in results:
        env = r.environment
        if not env:
            continue
        visible = f" ({env['gpu_count']} visible)" if "gpu_count" in env else ""
        line = (f"{env.get('gpu') or 'no GPU'}{visible}, torch {env.get('torch')}, "
                f"Transformer Engine {env.get('transformer_engine')}, {env.get('date')}")
        counts[line] = counts.get(line, 0) + 1
    lines = [f"- {line}: {n} point{'s' if n > 1 else ''}" for line, n in counts.items()]
    missing = len(results) - sum(counts.values())
    if missing:
        lines.append(f"- not recorded: {missing} point{'s' if missing > 1 else ''} (from before the runner "
                     "recorded its machine)")
    return "Machines that ran the points (each point's own `environment`):\n\n" + "\n".join(lines) + "\n"


def _precision_label(r: ScalingResult) -> str:
    return r.precision + (" + AC" if r.activation_checkpointing else "")


def plot(results: list[ScalingResult], path: Path) -> None:
    import matplotlib  # optional dependency

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional dependency

    groups: dict[tuple, list[ScalingResult]] = {}
    for r in results:
        groups.setdefault((r.model, r.layers, _precision_label(r)), []).append(r)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for (model, layers, precision), rows in sorted(groups.items()):
        rows = sorted(rows, key=lambda r: (r.gpus, r.layout))
        ax.plot([f"{r.gpus} GPU\n{r.layout}" for r in rows], [r.tokens_per_s_per_gpu / 1e3 for r in rows],
                marker="o", label=f"{model} {layers}L {precision}")
    ax.set_ylabel("tokens / s per GPU (thousands)")
    ax.set_title("biomoe weak scaling, cli.py fit under ExpertParallelStrategy")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)


def fit(cfg: dict, run_dir: Path, timeout_s: float, cli_args: list[str] = ()) -> float:
    """Write ``cfg`` beside the run and train it with ``cli.py fit`` (plus ``cli_args``, e.g.
    ``--trainer.profiler=simple``); returns wall-clock seconds.

    The fit runs in its own process group, and a timeout kills the whole group: Lightning starts
    ranks 1..N-1 as children of rank 0, and killing rank 0 alone would leave them holding their
    GPUs (blocked in a collective) while the next point starts. Being outside the runner's group,
    the fit no longer gets the runner's SIGTERM (``timeout 300 python -m bench.scaling``),
    so SIGTERM is turned into an exit that kills the group first. A lock on ``run_dir`` refuses a
    second runner writing the same point (its config, log and CSVLogger version would mix)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _exit_on_signal) if main_thread else None
    try:
        with (run_dir / ".scaling.lock").open("w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RuntimeError(f"{run_dir}: another scaling runner is writing this point") from None
            return _fit_locked(cfg, run_dir, timeout_s, cli_args)
    finally:
        if main_thread:  # (None: a handler installed outside Python)
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _fit_locked(cfg: dict, run_dir: Path, timeout_s: float, cli_args: list[str]) -> float:
    cfg_path = run_dir / "config.yaml"
    write_text(cfg_path, yaml.safe_dump(cfg, sort_keys=False))
    cmd = [sys.executable, str(ROOT / "cli.py"), "fit", "--config", str(cfg_path), *cli_args]
    print("+", " ".join(cmd), flush=True)
    start = time.perf_counter()
    with (run_dir / "fit.log").open("w") as log:
        # Each point is its own job: a rendezvous port left in the environment by an earlier
        # process group (this process's, or the caller's) would be taken already.
        env = {k: v for k, v in os.environ.items()
               if k not in ("MASTER_PORT", "MASTER_ADDR", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK")}
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            proc.wait(timeout=timeout_s)
        except BaseException:  # the timeout, Ctrl-C or SIGTERM in the runner: no rank may outlive it
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            raise
    if proc.returncode != 0:
        tail = (run_dir / "fit.log").read_text(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"fit failed (exit {proc.returncode}): {' | '.join(tail)}")
    return time.perf_counter() - start


def point_environment() -> dict:
    """The machine that ran a point, taken by the runner beside the fit (same host, same visible
    GPUs): GPU name, how many GPUs the fit could see, software and date. Recorded in each point
    file, because the machine that later merges the points into a report is often another one."""
    return {**environment(), "gpu_count": torch.cuda.device_count()}


def _first_line(err: Exception) -> str:
    """``Type: first line of the message``: errors here must print as one line."""
    text = str(err)
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


def load_base_config(path: str) -> dict:
    """The config every point starts from; ValueError (one line, naming the file) if unusable."""
    try:
        base = yaml.safe_load(Path(path).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise ValueError(f"{path}: cannot read the config ({_first_line(err)})") from None
    if not (isinstance(base, dict) and isinstance(base.get("model"), dict)
            and isinstance(base["model"].get("config"), dict) and isinstance(base.get("data"), dict)
            and isinstance(base.get("trainer", {}), dict)):
        raise ValueError(f"{path}: not a biomoe fit config (needs model.config, data and trainer sections)")
    scaling_config(base, Layout(1, 1), "bf16", 1, Path("."))  # the strategy check, before any fit
    return base


def check_run_args(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """Precisions and extra CLI arguments of ``run``; ValueError (one line) for input that would
    only fail inside every fit, or silently measure something else (``--layers 0`` = the base depth)."""
    if args.layers is not None and args.layers < 1:
        raise ValueError(f"--layers {args.layers}: must be >= 1")
    if args.warmup < 0 or args.steps <= args.warmup:
        raise ValueError(f"--steps {args.steps} --warmup {args.warmup}: need 0 <= warmup < steps "
                         "(the median is taken over the steps after the warm-up)")
    if not args.timeout > 0:
        raise ValueError(f"--timeout {args.timeout}: must be > 0 seconds")
    precisions = [parse_precision(text) for text in args.precisions.split(",")]
    try:
        cli_args = shlex.split(args.cli_args)
    except ValueError as err:
        raise ValueError(f"--cli-args {args.cli_args!r}: {err}") from None
    return precisions, cli_args


def run(args: argparse.Namespace) -> int:
    try:
        base = load_base_config(args.config)
        layouts = [Layout.parse(text) for text in args.layouts.split(",")]
        precisions, cli_args = check_run_args(args)
    except ValueError as err:
        print(f"biomoe scaling: error: {err}", file=sys.stderr)
        return 2
    model = Path(args.config).stem
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    failures = 0
    layers = args.layers or shape_of(base).layers  # the config's depth, or the model's default
    ac = (bool(base["model"].get("runtime", {}).get("activation_checkpointing"))
          if args.activation_checkpointing is None else args.activation_checkpointing)
    for precision in precisions:
        for layout in layouts:
            name = point_name(model, layers, precision, layout, ac)
            run_dir = out / name
            cfg = scaling_config(base, layout, precision, args.steps, run_dir, layers=layers,
                                 fasta=args.fasta, activation_checkpointing=ac,
                                 lr_warmup_steps=args.lr_warmup_steps)
            for stale in (out / f"{name}.json", out / f"{name}.failed"):  # a previous attempt's
                stale.unlink(missing_ok=True)
            try:
                wall = fit(cfg, run_dir, args.timeout, cli_args)
                res = result_from_metrics(cfg, model, precision, layout,
                                          read_metrics(run_dir, args.warmup), wall, args.concurrent)
            except (RuntimeError, ValueError, FileNotFoundError, subprocess.TimeoutExpired) as err:
                failures += 1
                print(f"{name}: FAILED: {err}", flush=True)
                write_text(out / f"{name}.failed", f"{err}\n")
                continue
            res.environment = point_environment()
            write_text(out / f"{name}.json", json.dumps(asdict(res), indent=2))
            print(f"{name}: {res.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, {res.tflops_per_gpu:.0f} "
                  f"TFLOP/s/GPU, peak {res.peak_mem_gb} GB, loss {res.first_loss:.3f} -> "
                  f"{res.last_loss:.3f}, {wall:.0f} s", flush=True)
    return 1 if failures else 0


def report(args: argparse.Namespace) -> int:
    results = []
    for path in (p for d in args.dirs for p in sorted(Path(d).glob("*.json"))):
        try:
            results.append(ScalingResult(**json.loads(path.read_text())))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, TypeError) as err:
            print(f"biomoe scaling: error: {path}: not a scaling result ({_first_line(err)})",
                  file=sys.stderr)
            return 2
    if not results:
        print(f"biomoe scaling: error: no result JSON under {', '.join(args.dirs)}", file=sys.stderr)
        return 2
    add_efficiency(results)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    recorded = [r.environment for r in results if r.environment]
    env = {"command": " ".join(sys.argv),
           "timing": "median train/tokens_per_s (host clock between steps, logged every step) after warm-up, "
                     "per fit; see each result's wall_s",
           "run_environments": [dict(e) for e in {json.dumps(e, sort_keys=True): e for e in recorded}.values()],
           "runs_without_environment": len(results) - len(recorded),
           "report_written_on": environment()}  # the machine that merged the points, not the one that ran them
    write_text(out / "scaling.json", json.dumps({**env, "results": [asdict(r) for r in results]}, indent=2))
    table = markdown(results)
    write_text(out / "scaling.md", f"{table}\n{run_machines(results)}")
    plot(results, out / "scaling.png")
    print(table)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="short fits, one per precision x layout; one JSON per point")
    r.add_argument("--config", default="configs/mixtral-8x7b-ep8.yaml")
    r.add_argument("--layers", type=int, default=None, help="override num_layers (depth)")
    r.add_argument("--layouts", default="1x1,1x2,1x4,2x2",
                   help="comma list of DPxEP, or 'single' (1 GPU, Lightning's default strategy)")
    r.add_argument("--precisions", default="bf16,fp8-block")
    r.add_argument("--steps", type=int, default=30)
    r.add_argument("--warmup", type=int, default=10, help="steps left out of the median")
    r.add_argument("--fasta", default=None, help="override data.fasta")
    r.add_argument("--lr-warmup-steps", type=int, default=None,
                   help="override the config's LR warm-up (default: keep it, so a short fit is the "
                        "recipe's first steps; a warm-up squeezed into a few steps makes runs diverge)")
    r.add_argument("--activation-checkpointing", action=argparse.BooleanOptionalAction, default=None)
    r.add_argument("--timeout", type=float, default=600.0, help="seconds per fit")
    r.add_argument("--cli-args", default="", help="extra cli.py fit arguments, space-separated")
    r.add_argument("--concurrent", default="", help="note for runs sharing the host with others")
    r.add_argument("--out", required=True)
    p = sub.add_parser("report", help="merge result JSONs: table, efficiency, plot")
    p.add_argument("dirs", nargs="+")
    p.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    return run(args) if args.cmd == "run" else report(args)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
