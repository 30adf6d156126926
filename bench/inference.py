"""Inference rows of ``python -m bench``: biomoe's commands against HF Mixtral, same weights.

For every network (a config's ``model.config``: ``genome`` = configs/genome.yaml, ``dna-small`` =
configs/dna-small.yaml, or a YAML path) the bench writes a randomly initialised checkpoint in the
format ``cli.py fit`` writes (throughput does not depend on the weights' values), exports it with
:func:`biomoe.interop.hf.export_hf`, and times, on one genome:

* ``score-fasta`` (bases/s): the command, against HF scoring the same windows
  (:func:`~bench.inference_hf.hf_score_fasta`);
* ``embed`` (bases/s): ``--pool window``, against HF's last hidden state pooled the same way;
* ``score-variants`` (variants/s): random SNVs of the genome, against HF summing the ref and alt
  windows' log-likelihoods;
* ``generate-N`` (bases/s and decode steps/s): N samples from ``<bos>``, against ``model.generate``
  with a static cache.

Every run is a fresh process, as users run the commands (``python cli.py ...`` against ``python -m
bench.inference_hf_job ...``; ``fresh_process=False`` runs both in this process, a diagnostic).
Each contender runs once cold (its wall time is the row's ``cold_seconds``), then ``repeats`` times
interleaved with its HF baseline (biomoe, HF, biomoe, HF, ...); every run is kept in the record's
``runs`` and the record gives the median and range. The rate of score-fasta, embed and
score-variants is over the wall time of the whole process on both sides (biomoe: start-up, the
command, checkpoint load and output file; HF: start-up, ``from_pretrained`` to the device, the
work and its result file); ``compute_rate`` leaves the load out (biomoe:
the time the command reports on stderr, where it reports one) but keeps the first batch, whose
kernel selection, compilation and allocator growth take seconds on a GPU; ``steady_rate`` is the
rate after the first batch (the first decode step for generation), what a longer input approaches.
Generation rates are over the
sampling time alone (the command's report, HF's ``generate`` call), the wall time where the
command reports none. ``ratio_vs_hf`` = biomoe median / HF median on the same basis.
"""

from __future__ import annotations

import dataclasses
import gc
import gzip
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from bench.inference_cli import build_argv, exit_error, run_command
from biomoe.files import write_text
from biomoe.model.config import LAYER_BACKEND_FIELDS

__all__ = ["INFERENCE_TASKS", "InferenceRecord", "InferenceSettings", "NETWORKS", "default_fasta",
           "forward_flops_per_token", "inference_markdown", "network_config", "plan_inference",
           "run_inference", "write_bench_checkpoint", "write_random_snvs"]

ROOT = Path(__file__).resolve().parents[1]
NETWORKS = {"genome": ROOT / "configs" / "genome.yaml", "dna-small": ROOT / "configs" / "dna-small.yaml"}
GENOMES = (ROOT / "data" / "large" / "ecoli536_NC_008253.fna.gz", ROOT / "data" / "yeast_chrI.fna.gz")
INFERENCE_TASKS = ("score-fasta", "embed", "score-variants", "generate")
HF = "hf"
BIOMOE = "biomoe"
FLOP_NOTE = ("forward FLOPs/token = 2·N_active + 2·layers·(heads·head_dim)·S, S = the window (scoring, "
             "embedding, variants: causal attention over the window) or the generated length (decoding "
             "with a KV cache: position t attends to t tokens, on average S/2, scores and values each "
             "2 FLOPs per multiply-add); N_active counts the LM head and the top-k experts' weights")


def default_fasta() -> Path:
    """E. coli 536 (``make data``) when present, else the bundled yeast chromosome I."""
    return next((path for path in GENOMES if path.is_file()), GENOMES[-1])


def network_config(name: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(label, ``model.config``, ``model.runtime``) of a network name or a YAML path."""
    path = NETWORKS.get(name)
    if path is None:
        path = Path(name)
        if not path.is_file():
            raise ValueError(f"--inference-networks: {name!r} is neither {' nor '.join(NETWORKS)} nor a YAML file")
    with open(path) as handle:
        config = yaml.safe_load(handle) or {}
    model = config.get("model") or {}
    if not isinstance(model.get("config"), dict):
        raise ValueError(f"{path}: no model.config section")
    label = name if name in NETWORKS else path.stem
    return label, dict(model["config"]), dict(model.get("runtime") or {})


def write_bench_checkpoint(path: Path, config: dict[str, Any], runtime: dict[str, Any] | None = None,
                           seed: int = 0) -> Path:
    """A randomly initialised model of ``config`` (``model.config`` fields) saved as ``cli.py fit``
    saves one: ``model.``-prefixed fp32 weights, the config (and runtime) as hyper-parameters."""
    from biomoe.checkpoint.hparams import model_config_from
    from biomoe.model.transformer import MoETransformer

    cfg = model_config_from(config)
    torch.manual_seed(seed)
    model = MoETransformer(cfg)
    hparams: dict[str, Any] = {"config": dataclasses.asdict(cfg)}
    if runtime:
        hparams["runtime"] = dict(runtime)
    ckpt = {"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}, "hyper_parameters": hparams}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, path)
    return path


def write_random_snvs(fasta: Path, path: Path, count: int, seed: int = 0) -> Path:
    """``count`` random substitutions (contig, 1-based position, ref, alt) as TSV: positions drawn
    by contig length, the reference base read from the genome (A/C/G/T only), alt one of the others."""
    from biomoe.data.sources.registry import open_reader

    genome = open_reader(fasta)
    contigs = [c for c in genome.contigs if c.length > 0]
    lengths = np.array([c.length for c in contigs], dtype=np.float64)
    rng = np.random.default_rng(seed)
    rows = []
    attempts = 0
    while len(rows) < count:
        attempts += 1
        if attempts > 100 * count + 1000:
            raise ValueError(f"{fasta}: too few A/C/G/T bases for {count} random SNVs")
        contig = contigs[int(rng.choice(len(contigs), p=lengths / lengths.sum()))]
        pos = int(rng.integers(0, contig.length))
        ref = genome.fetch(contig.name, pos, pos + 1).upper()
        if ref not in ("A", "C", "G", "T"):
            continue
        alt = [b for b in "ACGT" if b != ref][int(rng.integers(0, 3))]
        rows.append(f"{contig.name}\t{pos + 1}\t{ref}\t{alt}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("contig\tposition\tref\talt\n" + "\n".join(rows) + "\n")
    return path


def forward_flops_per_token(config: dict[str, Any], context: int) -> float:
    """Forward FLOPs of one token attending over ``context`` (see :data:`FLOP_NOTE`)."""
    from biomoe.checkpoint.hparams import model_config_from

    cfg = model_config_from(config)
    return 2.0 * cfg.active_params_per_token() + 2.0 * cfg.num_layers * cfg.num_heads * cfg.head_dim * context


# ---------------------------------------------------------------------------------------------- records
@dataclass
class InferenceRecord:
    """One contender on one network and task. ``status`` is ok or error (with ``error``)."""

    network: str
    task: str
    contender: str
    unit: str
    status: str = "ok"
    error: str | None = None
    work: int | None = None
    """Bases (or variants) per run."""
    rate: float | None = None
    """Median of the runs' work / seconds (the basis is in ``basis``)."""
    rate_min: float | None = None
    rate_max: float | None = None
    basis: str = "wall"
    """``wall``: the whole call; ``compute``: without loading the model (generation rows)."""
    wall_rate: float | None = None
    compute_rate: float | None = None
    """Median over the runs of work / the time without the load, first batch included (the whole run)."""
    steady_rate: float | None = None
    """Median over the runs of the rate after the first batch (generation: the first decode step),
    without its warm-up; None where a contender does not time its first batch apart, or ran one."""
    steps_per_s: float | None = None
    """Generation: decode steps per second (median), one base per sample each."""
    ratio_vs_hf: float | None = None
    cold_seconds: float | None = None
    """Wall time of the first run (fresh processes: nothing imported, compiled or verified before)."""
    cold_rate: float | None = None
    tflops: float | None = None
    """Model forward TFLOP/s at ``rate`` (``flop_formula`` of the report)."""
    peak_mem_gb: float | None = None
    """The largest torch.cuda.max_memory_allocated of the runs (reset before each)."""
    runs: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.network}/{self.task}/{self.contender}"

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class InferenceSettings:
    device: torch.device
    networks: list[str]
    tasks: list[str] = field(default_factory=lambda: list(INFERENCE_TASKS))
    fasta: Path = field(default_factory=default_fasta)
    repeats: int = 3
    length: int = 2000
    samples: list[int] = field(default_factory=lambda: [64, 1])
    variants: int = 4096
    window: int = 1024
    pool_size: int = 1000
    batch_tokens: int | None = None
    """Passed to the commands that take ``--batch-tokens`` and used by HF; None = the commands'
    defaults, and biomoe's default for the device on the HF side."""
    seed: int = 0
    work_dir: Path | None = None
    kernels: list[str] = field(default_factory=lambda: ["default"])
    """biomoe contenders by kernels: ``default`` (contender ``biomoe``: the command's own choice),
    ``torch`` or ``te`` (``biomoe-torch``, ``biomoe-te``: attention, norm, router and dispatch on those
    kernels through the commands' ``--*-backend`` options), timed interleaved against one HF side."""
    fresh_process: bool = True
    """Each run a new process, as users run the commands (biomoe: ``python cli.py ...``; HF:
    ``python -m bench.inference_hf_job ...``); False runs both inside this process, warm, a
    diagnostic of the steady state."""

    def as_dict(self) -> dict[str, Any]:
        out = {k: (str(v) if isinstance(v, (Path, torch.device)) else v) for k, v in dataclasses.asdict(self).items()}
        out["device"] = str(self.device)
        return out


def plan_inference(settings: InferenceSettings) -> list[str]:
    """The row ids the settings would run (``network/task/contender``)."""
    unknown = [t for t in settings.tasks if t not in INFERENCE_TASKS]
    if unknown:
        raise ValueError(f"--inference-tasks: unknown {', '.join(unknown)}; choose from {', '.join(INFERENCE_TASKS)}")
    if settings.repeats < 1 or settings.length < 1 or settings.variants < 1 or not settings.samples:
        raise ValueError("--inference-repeats, --inference-length, --inference-variants must be >= 1")
    bad = [k for k in settings.kernels if k not in KERNEL_SETS]
    if bad or not settings.kernels:
        raise ValueError(f"--inference-kernels: unknown {', '.join(bad) or '(none given)'}; "
                         f"choose from {', '.join(KERNEL_SETS)}")
    ids = []
    for name in settings.networks:
        label = network_config(name)[0]
        for task in task_names(settings):
            ids += [f"{label}/{task}/{contender_name(k)}" for k in settings.kernels] + [f"{label}/{task}/{HF}"]
    return ids


KERNEL_SETS = ("default", "torch", "te")
"""What ``--inference-kernels`` accepts (see :attr:`InferenceSettings.kernels`)."""


def contender_name(kernels: str) -> str:
    """``biomoe`` for the commands' own kernel choice, ``biomoe-torch`` / ``biomoe-te`` otherwise."""
    return BIOMOE if kernels == "default" else f"{BIOMOE}-{kernels}"


def kernel_options(kernels: str) -> list[str]:
    """The command-line options that put every layer component on ``kernels`` (none for default)."""
    if kernels == "default":
        return []
    return [opt for field_name in LAYER_BACKEND_FIELDS for opt in ("--" + field_name.replace("_", "-"), kernels)]


def task_names(settings: InferenceSettings) -> list[str]:
    out = []
    for task in settings.tasks:
        out += [f"generate-{n}" for n in settings.samples] if task == "generate" else [task]
    return out


# ------------------------------------------------------------------------------------------ measuring
def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def _peak_gb(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def _sync_fn(device: torch.device) -> Callable[[], None] | None:
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None


@dataclass
class Task:
    """One inference task of one network: how each contender runs it once."""

    name: str
    unit: str
    basis: str
    context: int
    tokens_per_unit: float
    biomoe: dict[str, Callable[[bool], dict[str, Any]]]
    """Contender name (:func:`contender_name`) -> one run of the command with those kernels."""
    hf: Callable[[bool], dict[str, Any]] | None
    samples: int | None = None
    """Generation: samples per call (decode steps = work / samples)."""
    close: Callable[[], None] | None = None
    """Called when the task's runs are done (drops a model kept between runs)."""


def _tsv_column(path: Path, column: str) -> list[float]:
    with open(path) as handle:
        header = handle.readline().rstrip("\n").split("\t")
        index = header.index(column)
        return [float(line.split("\t")[index]) for line in handle if line.strip()]


def _biomoe_run(argv: list[str], missing: list[str], device: torch.device, work: int,
                check: Callable[[], dict[str, Any]] | None = None, fresh: bool = False) -> dict[str, Any]:
    run = run_command(argv, _sync_fn(device), fresh=fresh)
    out: dict[str, Any] = {"seconds": run.seconds, "work": work, "argv": ["cli.py", *run.argv]}
    if check is not None:
        out["details"] = check()  # what was computed, to compare with HF's (outside the timing)
    if missing:
        out["options_not_accepted"] = missing
    if run.kernels:
        out["kernels"] = run.kernels
    if run.report is not None:
        out["compute_seconds"] = run.report.seconds
        if run.report.first_seconds is not None:
            out["first_batch_seconds"] = run.report.first_seconds
            out["first_batch_work"] = run.report.first_bases
        if run.report.steps_per_s is not None:
            out["reported_steps_per_s"] = run.report.steps_per_s
    return out


def build_tasks(label: str, config: dict[str, Any], ckpt: Path, export: Path, fasta: Path, variants: Path,
                genome_bases: int, s: InferenceSettings, work: Path) -> list[Task]:
    from bench import inference_hf as hf
    from biomoe.inference.batching import default_batch_tokens

    device = s.device
    dev = str(device)
    hf_tokens = s.batch_tokens or default_batch_tokens(device)
    batch = {"--batch-tokens": s.batch_tokens}
    tasks: list[Task] = []
    have_hf = _transformers_available()
    fresh = s.fresh_process
    common = ["--export", export, "--device", dev, "--window", s.window, "--batch-tokens", hf_tokens]

    def per_kernels(make: Callable[[str], Callable[[bool], dict[str, Any]]]) -> dict[str, Callable]:
        return {contender_name(k): make(k) for k in s.kernels}

    def hf_side(job: str, extra: list[object],
                in_process: Callable[[], Any]) -> Callable[[bool], dict[str, Any]] | None:
        """HF's run of a job: its own process (``fresh``), else ``in_process()`` here; None without transformers."""
        if not have_hf:
            return None
        if fresh:
            return lambda warm: _hf_fresh([job, *common, *extra], work / f"{label}-hf-{job}.json")
        return lambda warm: _hf_run(in_process())
    for task in s.tasks:
        if task == "score-fasta":
            out = work / f"{label}-score"
            argv, missing = build_argv("score-fasta", [str(ckpt), str(fasta)], {"--out": out},
                                       {"--window": s.window, **batch, "--no-progress": True, "--device": dev})
            tasks.append(Task(task, "bases/s", "wall", s.window, 1.0,
                              per_kernels(lambda k, a=argv, m=missing, o=out: lambda warm: _biomoe_run(
                                  a + kernel_options(k), m, device, genome_bases,
                                  lambda: {"log_likelihood": sum(_tsv_column(o.with_suffix(".tsv"), "log_likelihood"))},
                                  fresh)),
                              hf_side("score-fasta", ["--fasta", fasta],
                                      lambda: hf.hf_score_fasta(export, fasta, device, s.window, hf_tokens))))
        elif task == "embed":
            out = work / f"{label}-embed.npz"
            argv, missing = build_argv("embed", [str(ckpt), str(fasta)], {"--out": out, "--pool": "window"},
                                       {"--pool-size": s.pool_size, "--window": s.window, **batch,
                                        "--no-progress": True, "--device": dev})
            tasks.append(Task(task, "bases/s", "wall", s.window, 1.0,
                              per_kernels(lambda k, a=argv, m=missing: lambda warm: _biomoe_run(
                                  a + kernel_options(k), m, device, genome_bases, fresh=fresh)),
                              hf_side("embed", ["--fasta", fasta, "--pool-size", s.pool_size],
                                      lambda: hf.hf_embed(export, fasta, device, s.window, hf_tokens, s.pool_size))))
        elif task == "score-variants":
            out = work / f"{label}-variants.tsv"
            argv, missing = build_argv("score-variants", [str(ckpt), str(fasta)],
                                       {"--variants": variants, "--out": out},
                                       {"--window": s.window, **batch, "--no-progress": True, "--device": dev})
            tasks.append(Task(task, "variants/s", "wall", s.window, 2.0 * s.window,
                              per_kernels(lambda k, a=argv, m=missing, o=out: lambda warm: _biomoe_run(
                                  a + kernel_options(k), m, device, s.variants,
                                  lambda: {"mean_llr": float(np.mean(_tsv_column(o, "llr")))}, fresh)),
                              hf_side("score-variants", ["--fasta", fasta, "--variants", variants],
                                      lambda: hf.hf_score_variants(export, fasta, variants, device, s.window,
                                                                   hf_tokens))))
        elif task == "generate":
            for n in s.samples:
                tasks.append(_generate_task(label, n, ckpt, export, s, work, have_hf))
    return tasks


def _generate_task(label: str, n: int, ckpt: Path, export: Path, s: InferenceSettings, work: Path,
                   have_hf: bool) -> Task:
    from bench import inference_hf as hf

    device = s.device
    fresh = s.fresh_process
    generator = None if fresh else hf.HFGenerator(export, device)
    warm_length = s.length if fresh else min(s.length, 64)  # fresh: the first run is the cold run of the job

    def argv_for(length: int) -> tuple[list[str], list[str]]:
        return build_argv("generate", [str(ckpt)], {"--out": work / f"{label}-generate-{n}.fa"},
                          {"--num-samples": n, "--length": length, "--batch-size": n, "--no-progress": True,
                           "--device": str(device)})

    def biomoe(kernels: str) -> Callable[[bool], dict[str, Any]]:
        def run(warm: bool) -> dict[str, Any]:
            length = warm_length if warm else s.length
            argv, missing = argv_for(length)
            return _biomoe_run(argv + kernel_options(kernels), missing, device, n * length, fresh=fresh)
        return run

    def hf_run(warm: bool) -> dict[str, Any]:
        length = warm_length if warm else s.length
        if generator is None:
            return _hf_fresh(["generate", "--export", export, "--device", device, "--num-samples", n,
                              "--length", length], work / f"{label}-hf-generate-{n}.json")
        result = _hf_run(hf.hf_generate(generator, n, length))
        result["held_bytes"] = result["details"].pop("held_bytes", 0)
        return result

    return Task(f"generate-{n}", "bases/s", "compute", s.length, 1.0,
                {contender_name(k): biomoe(k) for k in s.kernels}, hf_run if have_hf else None, n,
                None if generator is None else generator.close)


def _hf_fresh(args: list[object], result: Path) -> dict[str, Any]:
    """An HF job (:mod:`bench.inference_hf_job`) in a new process, timed from its start to its
    exit; its result file gives the work, the time after loading and what it computed."""
    command = [sys.executable, "-m", "bench.inference_hf_job", *map(str, args), "--out", str(result)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise exit_error(f"HF {args[0]}", done.returncode, done.stderr)
    data = json.loads(result.read_text())
    return {"seconds": seconds, "compute_seconds": data["compute_seconds"], "work": data["work"],
            "details": data["details"], "argv": ["python", *command[1:]],
            **_first_batch(data.get("first_batch_seconds"), data.get("first_batch_work"))}


def _hf_run(result) -> dict[str, Any]:
    return {"seconds": result.seconds, "compute_seconds": result.compute_seconds, "work": result.work,
            "details": result.details, **_first_batch(result.first_seconds, result.first_work)}


def _first_batch(seconds: float | None, work: int | None) -> dict[str, Any]:
    return {} if seconds is None else {"first_batch_seconds": seconds, "first_batch_work": work}


def _transformers_available() -> bool:
    try:
        import transformers  # noqa: F401  (optional dependency)
    except ImportError:
        return False
    return True


def _timed(run: Callable[[bool], dict[str, Any]], device: torch.device, warm: bool,
           fresh: bool = False) -> dict[str, Any]:
    """One run; its peak memory counts what it allocated itself (plus a model it keeps between runs,
    ``held_bytes``), not what another contender holds at the time. A run in another process
    allocates nothing here: no peak is recorded for it."""
    _free(device)
    before = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    started = time.time()
    result = run(warm)
    peak = None if fresh else _peak_gb(device)
    if peak is not None:
        result["peak_mem_gb"] = peak - (before - result.pop("held_bytes", 0)) / 2**30
    result.pop("held_bytes", None)
    result["started"] = round(started, 3)
    _free(device)
    return result


def _summarise(record: InferenceRecord, runs: list[dict[str, Any]], task: Task, config: dict[str, Any]) -> None:
    record.runs = runs
    record.work = runs[0]["work"]
    for run in runs:
        run["wall_rate"] = run["work"] / run["seconds"]
        if run.get("compute_seconds"):
            run["compute_rate"] = run["work"] / run["compute_seconds"]
        first, first_work = run.get("first_batch_seconds"), run.get("first_batch_work")
        if run.get("compute_seconds") and first is not None and first_work is not None:
            steady_seconds, steady_work = run["compute_seconds"] - first, run["work"] - first_work
            if steady_seconds > 0 and steady_work > 0:
                run["steady_rate"] = steady_work / steady_seconds
    wall = [r["wall_rate"] for r in runs]
    compute = [r["compute_rate"] for r in runs if "compute_rate" in r]
    steady = [r["steady_rate"] for r in runs if "steady_rate" in r]
    record.wall_rate = statistics.median(wall)
    record.compute_rate = statistics.median(compute) if len(compute) == len(runs) else None
    record.steady_rate = statistics.median(steady) if steady and len(steady) == len(runs) else None
    chosen = compute if record.basis == "compute" else wall
    if task.samples:  # decode steps: one base of every sample each, on the record's basis
        for run in runs:
            run["steps_per_s"] = run["work"] / task.samples / (
                run["compute_seconds"] if record.basis == "compute" else run["seconds"])
        record.steps_per_s = statistics.median(r["steps_per_s"] for r in runs)
    record.rate, record.rate_min, record.rate_max = statistics.median(chosen), min(chosen), max(chosen)
    flops = forward_flops_per_token(config, task.context) * task.tokens_per_unit
    record.tflops = record.rate * flops / 1e12
    peaks = [r["peak_mem_gb"] for r in runs if r.get("peak_mem_gb") is not None]
    record.peak_mem_gb = max(peaks) if peaks else None


def measure_task(label: str, task: Task, config: dict[str, Any], s: InferenceSettings,
                 log: Callable[[str], None]) -> list[InferenceRecord]:
    """Warm-up of each contender, then ``repeats`` interleaved runs of biomoe and HF."""
    contenders = list(task.biomoe.items()) + ([(HF, task.hf)] if task.hf is not None else [])
    records = {name: InferenceRecord(label, task.name, name, task.unit) for name, _ in contenders}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in contenders}
    for name, run in contenders:
        try:
            warm = _timed(run, s.device, True, s.fresh_process)
            records[name].details["warmup_seconds"] = round(warm["seconds"], 3)
            if s.fresh_process:  # the same job as the timed runs: the first, cold run of the command
                records[name].cold_seconds = warm["seconds"]
                records[name].cold_rate = warm["work"] / warm["seconds"]
        except Exception as err:
            traceback.print_exc()
            records[name].status, records[name].error = (
                "error", f"{type(err).__name__}: {' '.join(str(err).split())}"[:500])
    for repeat in range(s.repeats):
        for name, run in contenders:
            if records[name].status != "ok":
                continue
            try:
                result = _timed(run, s.device, False, s.fresh_process)
                result["repeat"] = repeat
                runs[name].append(result)
                log(f"  {label}/{task.name}/{name} run {repeat + 1}: {result['work'] / result['seconds']:,.0f} "
                    f"{task.unit} wall" + (f", {result['work'] / result['compute_seconds']:,.0f} compute (whole run)"
                                          if result.get("compute_seconds") else "")
                    + (f", first batch {result['first_batch_seconds']:.2f} s" if "first_batch_seconds" in result
                       else ""))
            except Exception as err:
                traceback.print_exc()
                records[name].status, records[name].error = (
                    "error", f"{type(err).__name__}: {' '.join(str(err).split())}"[:500])
    if task.close is not None:
        task.close()
    for name, _ in contenders:
        record = records[name]
        if record.status == "ok" and runs[name]:
            basis = task.basis
            if basis == "compute" and any("compute_seconds" not in r for c in task.biomoe for r in runs.get(c, [])):
                basis = "wall"  # the command reports no timing of its own: both sides on the wall clock
            record.basis = basis
            _summarise(record, runs[name], task, config)
            first = runs[name][0]
            record.details.update(first.get("details") or {})  # how it ran, what it computed
            for key in ("argv", "kernels", "options_not_accepted"):
                if key in first:
                    record.details[key] = first[key]
        elif record.status == "ok":
            record.status, record.error = "error", "no run finished"
    hf_record = records.get(HF)
    for name in task.biomoe:
        bio = records[name]
        if hf_record is None:
            bio.details["hf"] = "not run: transformers is not installed"
        elif hf_record.status == "ok" and bio.status == "ok" and hf_record.rate:
            bio.ratio_vs_hf = bio.rate / hf_record.rate  # both on the same basis (chosen above from biomoe's runs)
    return list(records.values())


# -------------------------------------------------------------------------------------------- running
def run_inference(settings: InferenceSettings, out: Path, command: str, env: dict[str, Any],
                  log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run every inference row; ``inference.json`` and ``inference.md`` in ``out`` are rewritten
    after every task, so a run cut short keeps what finished."""
    plan_inference(settings)  # bad names fail before anything is built
    records: list[InferenceRecord] = []
    started = time.time()
    notes: dict[str, Any] = {}

    def save() -> dict[str, Any]:
        report = {"command": command, "environment": env, "settings": settings.as_dict(), "flop_formula": FLOP_NOTE,
                  "timing": timing_note(settings.fresh_process), "wall_s": round(time.time() - started, 1), **notes,
                  "records": [r.as_dict() for r in records]}
        write_text(out / "inference.json", json.dumps(report, indent=2) + "\n")
        write_text(out / "inference.md", inference_markdown(report))
        return report

    work_root = Path(tempfile.mkdtemp(prefix="biomoe-bench-inference-", dir=settings.work_dir))
    try:
        fasta = _plain_fasta(settings.fasta, work_root)
        from biomoe.data.sources.registry import open_reader

        genome_bases = sum(c.length for c in open_reader(fasta).contigs)
        notes["genome"] = {"source": str(settings.fasta), "bases": genome_bases}
        notes["work_dir"] = str(work_root)
        variants = work_root / "snvs.tsv"
        if "score-variants" in settings.tasks:
            write_random_snvs(fasta, variants, settings.variants, settings.seed)
        report = save()
        for name in settings.networks:
            label, config, runtime = network_config(name)
            net_dir = work_root / label
            log(f"inference: {label}: writing a random checkpoint and its HF export")
            ckpt = write_bench_checkpoint(net_dir / "model.ckpt", config, runtime, settings.seed)
            export = net_dir / "hf"
            if _transformers_available():
                from biomoe.interop.hf import export_hf

                export_hf(ckpt, export)
            notes.setdefault("networks", {})[label] = {"model.config": config, "model.runtime": runtime}
            for task in build_tasks(label, config, ckpt, export, fasta, variants, genome_bases, settings, net_dir):
                log(f"inference: {label}/{task.name}")
                done = measure_task(label, task, config, settings, log)
                records.extend(done)
                report = save()
                for r in done:
                    ratio = "" if r.ratio_vs_hf is None else f" {r.ratio_vs_hf:.2f}x"
                    log(f"inference: {r.id:40s} {r.status:5s} {(r.rate or 0):12,.0f} {r.unit} ({r.basis})"
                        f"{ratio}{'  ' + (r.error or '')[:200] if r.error else ''}")
            shutil.rmtree(net_dir, ignore_errors=True)  # checkpoints of large networks are GBs
    finally:
        shutil.rmtree(work_root, ignore_errors=True)
    return report


def _plain_fasta(source: Path, work: Path) -> Path:
    """A gzip FASTA decompressed once into ``work`` (outside the timing, the same file for both
    sides); a plain one as it is."""
    source = Path(source)
    if not source.is_file():
        raise ValueError(f"--inference-fasta: {source}: no such file")
    with open(source, "rb") as handle:
        compressed = handle.read(2) == b"\x1f\x8b"
    if not compressed:
        return source
    target = work / (source.name[:-3] if source.name.endswith(".gz") else source.name + ".fa")
    with gzip.open(source, "rb") as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return target


def timing_note(fresh: bool) -> str:
    """How the rows were timed, for the report."""
    how = ("every run is a new process, as a user runs it (biomoe: `python cli.py COMMAND ...`; HF: "
           "`python -m bench.inference_hf_job JOB ...`), timed from its start to its exit: the "
           "interpreter, imports, checkpoint verification and load (HF: from_pretrained to the device), "
           "reading the genome, the forwards and the written result. The first run of each contender is the "
           "cold one (cold_seconds, cold_rate: nothing of it imported, compiled or verified before); then "
           "`repeats` warm runs interleaved with the HF baseline (biomoe, HF, biomoe, HF, ...)" if fresh else
           "both contenders run inside this process (a diagnostic of the steady state, not how users run the "
           "commands): each warms up once, then `repeats` runs interleaved with its HF baseline; basis wall: "
           "the whole call (biomoe: cli.py main(), checkpoint verification and load, reading the genome, "
           "writing the output; HF: from_pretrained to the device, the forwards, the results on the host)")
    return (how + "; rate = median of work / seconds over the warm runs, range in rate_min..rate_max, every "
            "run in `runs`. basis compute: without the load (biomoe: the time the command reports on stderr; "
            "HF: after the model is on the device), first batch included (compute_rate, the whole run); "
            "steady_rate: after the first batch (generation: the first decode step), whose warm-up "
            "(kernel selection, compilation, allocator growth) is left out. peak_mem_gb: "
            "torch.cuda.max_memory_allocated of in-process runs, reset before each (none for runs in a new process)")


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"


def _median_seconds(record: dict[str, Any]) -> float | None:
    runs = record.get("runs") or []
    return statistics.median(r["seconds"] for r in runs) if runs else None


def _num(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def inference_markdown(report: dict[str, Any]) -> str:
    env = report.get("environment") or {}
    s = report.get("settings") or {}
    genome = report.get("genome") or {}
    lines = [f"# biomoe inference bench on {env.get('gpu') or 'CPU'}", "",
             f"torch {env.get('torch')}, transformers {env.get('transformers')}, biomoe {env.get('biomoe_commit')}; "
             f"{report.get('wall_s')} s.", "", f"Command: `{report['command']}`", "",
             f"- Genome: `{genome.get('source')}` ({genome.get('bases', 0):,} bases); windows of {s.get('window')} "
             f"bases; {s.get('variants')} random SNVs; generation of {s.get('length')} bases per sample.",
             f"- Timing: {report['timing']}.", f"- {report['flop_formula']}.",
             "- ratio = biomoe median / HF median (same network, same weights, same basis).", ""]
    records = report.get("records") or []
    for network in dict.fromkeys(r["network"] for r in records):
        lines += [f"## {network}", "",
                  "| task | contender | rate | range | basis | wall rate | compute rate (whole run) | "
                  "steady rate (after 1st batch) | steps/s | vs HF | "
                  "TFLOP/s | peak GB | cold wall | warm wall | runs | status |",
                  "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | "
                  "---: | ---: | ---: | ---: | ---: | --- |"]
        for r in (r for r in records if r["network"] == network):
            status = r["status"] if r["status"] == "ok" else f"{r['status']}: {(r.get('error') or '')[:120]}"
            span = "—" if r.get("rate_min") is None else f"{r['rate_min']:,.0f}–{r['rate_max']:,.0f}"
            ratio = "—" if r.get("ratio_vs_hf") is None else f"{r['ratio_vs_hf']:.2f}×"
            lines.append(f"| {r['task']} | {r['contender']} | {_num(r.get('rate'), ',.0f')} {r['unit']} | {span} | "
                         f"{r.get('basis')} | {_num(r.get('wall_rate'), ',.0f')} | "
                         f"{_num(r.get('compute_rate'), ',.0f')} | {_num(r.get('steady_rate'), ',.0f')} | "
                         f"{_num(r.get('steps_per_s'), ',.0f')} | {ratio} | {_num(r.get('tflops'), '.1f')} | "
                         f"{_num(r.get('peak_mem_gb'), '.1f')} | {_seconds(r.get('cold_seconds'))} | "
                         f"{_seconds(_median_seconds(r))} | {len(r.get('runs') or [])} | {status} |")
        commands = [(f"{r['task']} ({r['contender']})", r["details"]["argv"]) for r in records
                    if r["network"] == network and r["contender"] != HF and "argv" in r.get("details", {})]
        if commands:
            work = report.get("work_dir")
            shown = [(task, " ".join(argv).replace(work, "WORK") if work else " ".join(argv))
                     for task, argv in commands]
            lines += ["", "Commands timed (WORK: the bench's scratch folder, removed afterwards):", ""]
            lines += [f"- {task}: `{text}`" for task, text in shown]
        lines.append("")
    return "\n".join(lines)
