"""``python -m bench``: Hugging Face Mixtral against biomoe, on one GPU, in one process.

Every row trains the same shape on the same token batch and is timed the same way: HF's
configurations (grouped_mm or eager experts, each with and without torch.compile, pure bf16, fused
AdamW: the fastest of them in the same run is the shape's baseline; also fp32 weights under bf16
autocast), biomoe's bare training loop, and the product path — a Lightning Trainer built from a shipped
config exactly as ``cli.py fit`` builds it. Writes ``bench.json`` (one record per row), ``bench.md``
and ``bench.png`` into ``--out``, rewritten after every row.

    python -m bench                      # full sweep (its duration: settings.wall_s in bench.json)
    python -m bench --quick              # one shape, bf16, few steps
    python -m bench --rows '*@16384/*/fp8-block'   # only matching rows (+ their baseline)
    python -m bench --list               # print the row ids and exit
    python -m bench --inference          # also the inference rows (written to inference.json/.md)
    python -m bench --inference-only     # only the inference rows

Inference rows (:mod:`bench.inference`) time ``score-fasta``, ``embed``, ``score-variants`` and
``generate`` on a genome against HF Mixtral loaded from the export of the same weights, after the
training rows: each run a fresh process, as users run the commands (cold, then warm), unless
``--inference-in-process``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from biomoe.backends.te.availability import device_info, te_usable
from biomoe.backends.te.precision import resolve_precision, te_support_checker
from bench.inference import INFERENCE_TASKS, InferenceSettings, default_fasta, plan_inference, run_inference
from bench.models import Contender, ReferenceInit, build_biomoe, build_hf, reference_init
from bench.product import CLI_VARIANTS, DEFAULT_CONFIG, config_expert_backend, read_config, run_cli
from bench.profile import profile_steps
from bench.records import BASELINE, HF_STRONGEST, BenchRecord, Row, combine_runs, fill_ratios, select_rows
from bench.report import environment, report_dict, write_report
from bench.shapes import DEFAULT_CASES, QUICK_CASES, SHAPE_RECIPES, SHAPES, BenchShape, parse_case
from bench.timing import free_memory, peak_memory_gb, throughput, time_training
from biomoe.errors import ConfigError
from biomoe.files import write_text
from biomoe.precisions import PRECISIONS, parse_precision

HF_CONTENDERS: dict[str, dict[str, Any]] = {
    "hf-bf16-fused": dict(experts_impl="grouped_mm", amp=False, fused_adam=True, compile_model=False,
                          about="HF MixtralForCausalLM, pure bf16 weights, grouped_mm experts, "
                                "torch.optim.AdamW(fused=True): the reference of the ratio column"),
    "hf-bf16-fused-compile": dict(experts_impl="grouped_mm", amp=False, fused_adam=True, compile_model=True,
                                  about="hf-bf16-fused with the model's forward through torch.compile"),
    "hf-eager": dict(experts_impl="eager", amp=False, fused_adam=True, compile_model=False,
                     about="HF MixtralForCausalLM, pure bf16, eager experts loop, fused AdamW"),
    "hf-eager-compile": dict(experts_impl="eager", amp=False, fused_adam=True, compile_model=True,
                             about="hf-eager with the model's forward through torch.compile"),
    "hf-amp-fused": dict(experts_impl="grouped_mm", amp=True, fused_adam=True, compile_model=False,
                         about="HF MixtralForCausalLM, fp32 weights under torch.autocast(bfloat16) "
                               "(HF Trainer bf16=True on an fp32 model), grouped_mm experts, fused AdamW"),
    "hf-bf16-foreach": dict(experts_impl="grouped_mm", amp=False, fused_adam=False, compile_model=False,
                            about="HF MixtralForCausalLM, pure bf16, grouped_mm experts, torch AdamW "
                                  "defaults (foreach)"),
}
LOOP_CONTENDERS = {
    "biomoe-loop": "biomoe's bare training loop: the model as training builds it, bf16 weights, "
                   "torch fused AdamW, no Lightning (the config's expert backend)",
    "biomoe-loop-compile": "biomoe-loop with model.runtime.compile (torch.compile of each block)",
    "biomoe-loop-graph": "biomoe-loop with torch kernels in every layer (grouped_mm experts) and the whole step "
                         "(forward, backward, capturable fused AdamW) replayed as one CUDA graph",
}
GRAPHED_LOOP = "biomoe-loop-graph"
ABLATION_PREFIX = "biomoe-loop[te "
LAYER_COMPONENTS = ("norm_backend", "attention_backend", "router_backend", "dispatch_backend")
DEFAULT_CONTENDERS = (*HF_STRONGEST, "biomoe-loop", "biomoe-loop-graph", "biomoe-cli", "biomoe-cli-repeated",
                      "biomoe-cli-nomaster")
"""Every HF configuration of the strongest baseline (the fastest of them is each shape's baseline),
the bare loop eager and as one CUDA graph (what the step costs without the host),
the product path on real data and on the repeated batch, and the product path without master
weights (the same optimizer work as the bare loop)."""
ALL_PRECISIONS = tuple(PRECISIONS)
PRECISION_SWEPT = ("biomoe-loop", "biomoe-loop-compile", "biomoe-cli")
"""Contenders run at every requested precision; HF rows are bf16, the other CLI variants run at
``--variant-precisions`` (they isolate one cost, measured in bf16 by default)."""


def contender_about(name: str) -> str:
    if name in HF_CONTENDERS:
        return HF_CONTENDERS[name]["about"]
    if name in LOOP_CONTENDERS:
        return LOOP_CONTENDERS[name]
    if name in CLI_VARIANTS:
        return CLI_VARIANTS[name].about
    if name.startswith(ABLATION_PREFIX):
        return "biomoe-loop with only this TE layer component on (the others torch)"
    raise ValueError(f"unknown contender {name!r}; choose from "
                     f"{', '.join([*HF_CONTENDERS, *LOOP_CONTENDERS, *CLI_VARIANTS])}")


def plan_rows(cases: list[BenchShape], contenders: list[str], precisions: list[str],
              variant_precisions: list[str]) -> list[Row]:
    """Every (shape, contender, precision) row, baseline first within each shape."""
    ordered = sorted(contenders, key=lambda c: c != BASELINE)
    rows = []
    for shape in cases:
        for contender in ordered:
            contender_about(contender)  # unknown names fail before anything runs
            if contender in HF_CONTENDERS or contender.startswith(ABLATION_PREFIX):
                chosen = ["bf16"]
            elif contender in PRECISION_SWEPT:
                chosen = precisions
            else:
                chosen = variant_precisions
            rows.extend(Row(shape, contender, p) for p in chosen)
    return rows


def precision_support(device: torch.device, precisions: list[str]) -> dict[str, str]:
    """Precisions this device cannot run, each with the one-line reason training would give."""
    te_ok = te_usable(device)
    info = device_info(device) if device.type == "cuda" else None
    out = {}
    for name in precisions:
        try:
            resolve_precision(name, None, info, te_ok, te_support_checker if te_ok else None)
        except ConfigError as err:
            out[name] = str(err)
    return out


def random_tokens(shape: BenchShape, device: torch.device, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random nucleotide ids (A/C/G/T = 4..7); labels are the next base. The same for every row."""
    gen = torch.Generator().manual_seed(seed)
    seq = torch.randint(4, 8, (shape.micro_batch, shape.seq + 1), generator=gen)
    return seq[:, :-1].contiguous().to(device), seq[:, 1:].contiguous().to(device)


def genome_tokens(shape: BenchShape, fasta: Path, device: torch.device, seed: int = 0
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """``micro_batch`` windows of ``seq + 1`` bases read from ``fasta`` at offsets drawn with
    ``seed`` (contigs chosen by length), tokenized as training tokenizes them; labels are the next
    base. Real sequence routes tokens to experts as training does, which random bases do not."""
    from biomoe.data.sources.registry import open_reader
    from biomoe.data.tokenizer import NucleotideTokenizer

    genome = open_reader(fasta)
    contigs = [c for c in genome.contigs if c.length > shape.seq + 1]
    if not contigs:
        raise ValueError(f"{fasta}: no contig is longer than the shape's {shape.seq + 1} bases")
    lengths = torch.tensor([c.length - shape.seq - 1 for c in contigs], dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    tokenizer = NucleotideTokenizer()
    windows = []
    for _ in range(shape.micro_batch):
        contig = contigs[int(torch.multinomial(lengths, 1, generator=gen))]
        start = int(torch.randint(0, contig.length - shape.seq - 1, (1,), generator=gen))
        windows.append(torch.as_tensor(tokenizer.encode(genome.fetch(contig.name, start, start + shape.seq + 1)),
                                       dtype=torch.long))
    seq = torch.stack(windows)
    return seq[:, :-1].contiguous().to(device), seq[:, 1:].contiguous().to(device)


def shape_config(shape: BenchShape, override: Path | None) -> Path:
    """The shipped config of a shape's ``cli.py fit`` rows (``--config`` replaces it for all)."""
    return override or DEFAULT_CONFIG.parent / SHAPE_RECIPES.get(shape.name, DEFAULT_CONFIG.name)


@dataclass
class BenchContext:
    device: torch.device
    config_path: Path | None
    """``--config``: the config of every shape's CLI rows; None: each shape's own (:data:`SHAPE_RECIPES`)."""
    warmup: int
    steps: int
    loop_backend: str | None
    """``--loop-backend``; None: the expert backend of the shape's config."""
    independent_init: bool = False
    fasta: Path | None = None
    """The genome every contender's tokens and the CLI's data module read; None: random bases."""
    tokens: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    inits: dict[str, ReferenceInit] = field(default_factory=dict)

    def batch(self, shape: BenchShape) -> tuple[torch.Tensor, torch.Tensor]:
        if shape.case not in self.tokens:  # one shape's tokens at a time
            self.tokens = {shape.case: genome_tokens(shape, self.fasta, self.device) if self.fasta
                           else random_tokens(shape, self.device)}
        return self.tokens[shape.case]

    def config_for(self, shape: BenchShape) -> Path:
        return shape_config(shape, self.config_path)

    def expert_backend(self, shape: BenchShape) -> str:
        return self.loop_backend or config_expert_backend(read_config(self.config_for(shape)))

    def init(self, shape: BenchShape) -> ReferenceInit | None:
        """The HF baseline's initial weights, converted (built once per shape, kept on the CPU)."""
        if self.independent_init:
            return None
        if shape.case not in self.inits:
            self.inits.clear()
            free_memory(self.device)
            self.inits[shape.case] = reference_init(shape, self.device)
            free_memory(self.device)
        return self.inits[shape.case]


def loop_builder(row: Row, ctx: BenchContext) -> tuple[Callable[[], Contender], dict[str, Any]]:
    shape, name = row.shape, row.contender
    if name in HF_CONTENDERS:
        spec = {k: v for k, v in HF_CONTENDERS[name].items() if k != "about"}
        details = {"weights": "fp32 under bf16 autocast" if spec["amp"] else "bf16",
                   "experts": spec["experts_impl"], "optimizer": "torch.optim.AdamW",
                   "fused": spec["fused_adam"], "torch_compile": spec["compile_model"], "init": "HF's (seed 0)"}
        return (lambda: build_hf(shape, spec["experts_impl"], ctx.device, fused_adam=spec["fused_adam"],
                                 amp=spec["amp"], compile_model=spec["compile_model"], label=name)), details
    init = ctx.init(shape)
    details = {"weights": "bf16", "optimizer": "torch.optim.AdamW", "fused": True,
               "expert_backend": ctx.expert_backend(shape),
               "init": "HF baseline's initial weights" if init is not None else "biomoe's own (seed 0)"}
    if name.startswith(ABLATION_PREFIX):
        component = name[len(ABLATION_PREFIX):-len(" only]")] + "_backend"
        layers = {c: ("te" if c == component else "torch") for c in LAYER_COMPONENTS}
        details["layer_backends"] = layers
        return (lambda: build_biomoe(shape, ctx.expert_backend(shape), row.precision, ctx.device, init=init,
                                     layer_backends=layers, label=name)), details
    if name == GRAPHED_LOOP:  # capture needs kernels that keep the split sizes on the device
        layers = {c: "torch" for c in LAYER_COMPONENTS}
        details.update(layer_backends=layers, expert_backend="grouped", capturable=True, cuda_graph="whole step")
        return (lambda: build_biomoe(shape, "grouped", row.precision, ctx.device, init=init,
                                     layer_backends=layers, label=name)), details
    compile_blocks = name == "biomoe-loop-compile"
    return (lambda: build_biomoe(shape, ctx.expert_backend(shape), row.precision, ctx.device, init=init,
                                 compile_blocks=compile_blocks, label=name)), details


def time_loop(row: Row, ctx: BenchContext, ids: torch.Tensor, labels: torch.Tensor):
    """Build and time a bare-loop contender. ``hf-amp-fused`` falls back to eager experts (noted in
    its details) if transformers' grouped_mm cannot run fp32 expert weights on this install, which
    is what an HF Trainer user would have to do too."""
    build, details = loop_builder(row, ctx)
    try:
        contender = build()
        return time_training(contender, ids, labels, ctx.warmup, ctx.steps,
                             graphed=row.contender == GRAPHED_LOOP), details
    except torch.OutOfMemoryError:
        raise
    except Exception as err:
        if row.contender != "hf-amp-fused":
            raise
        contender = None
        details["grouped_mm_error"] = f"{type(err).__name__}: {' '.join(str(err).split())}"[:300]
    free_memory(ctx.device)
    torch.manual_seed(0)
    details["experts"] = "eager (grouped_mm failed, see grouped_mm_error)"
    contender = build_hf(row.shape, "eager", ctx.device, fused_adam=True, amp=True, label=row.contender)
    return time_training(contender, ids, labels, ctx.warmup, ctx.steps), details


def measure(row: Row, ctx: BenchContext) -> BenchRecord:
    """Run one row; a failure becomes a record with its message, never an exception."""
    record = BenchRecord.for_row(row, warmup_steps=ctx.warmup)
    started = time.perf_counter()
    free_memory(ctx.device)
    torch.manual_seed(0)  # every contender starts from the same RNG state
    try:
        ids, labels = ctx.batch(row.shape)
        if row.contender in CLI_VARIANTS:
            run = run_cli(ctx.config_for(row.shape), row.shape, row.precision, ids, labels, ctx.warmup,
                          ctx.steps, CLI_VARIANTS[row.contender], fasta=ctx.fasta)
            step_ms, busy_ms, losses, record.details = run.step_ms, run.busy_ms, run.losses, run.details
            record.host_ms, record.kernels_per_step = run.host_ms, run.kernels_per_step
        else:
            timing, record.details = time_loop(row, ctx, ids, labels)
            step_ms, busy_ms, losses = timing.step_ms, timing.step_ms, timing.losses
            record.host_ms, record.kernels_per_step = timing.host_ms, timing.kernels_per_step
        speed = throughput(row.shape, step_ms)
        busy = throughput(row.shape, busy_ms)
        record.tokens_per_s, record.step_ms, record.busy_ms = speed.tokens_per_s, speed.step_ms, busy.step_ms
        record.tflops, record.mfu = speed.tflops, speed.mfu
        record.mean_step_ms = sum(step_ms) / len(step_ms)
        record.steps_timed, record.losses = len(step_ms), losses
    except torch.OutOfMemoryError as err:
        record.status, record.error = "oom", " ".join(str(err).split())[:300]
    except Exception as err:  # report and continue: one broken row must not hide the others
        traceback.print_exc()
        record.status, record.error = "error", f"{type(err).__name__}: {' '.join(str(err).split())}"[:500]
    record.peak_mem_gb = peak_memory_gb(ctx.device)
    free_memory(ctx.device)
    record.wall_s = time.perf_counter() - started
    return record


def seq_sweep(ctx: BenchContext, start: int, maximum: int, backend: str) -> list[dict[str, Any]]:
    """Longest trainable sequence on dna-small at micro-batch 1: HF bf16 fused vs biomoe with
    activation checkpointing (one step each, doubling until it fails)."""
    builders = {
        BASELINE: lambda s: build_hf(s, "grouped_mm", ctx.device, fused_adam=True, label=BASELINE),
        "biomoe-loop+ac": lambda s: build_biomoe(s, backend, "bf16", ctx.device, activation_checkpointing=True,
                                                 label="biomoe-loop+ac"),
    }
    out = []
    for label, build in builders.items():
        seq = start
        while seq <= maximum:
            shape = SHAPES["dna-small"].with_seq(seq, 1)
            free_memory(ctx.device)
            entry: dict[str, Any] = {"contender": label, "seq": seq}
            try:
                ids, labels = random_tokens(shape, ctx.device)
                timing = time_training(build(shape), ids, labels, 1, 1)
                entry.update(status="ok", tokens_per_s=throughput(shape, timing.step_ms).tokens_per_s)
            except torch.OutOfMemoryError:
                entry["status"] = "oom"
            except Exception as err:
                entry.update(status="error", error=f"{type(err).__name__}: {err}"[:300])
            entry["peak_mem_gb"] = peak_memory_gb(ctx.device)
            out.append(entry)
            print(f"sweep {label:16s} seq={seq:>8d} {entry['status']:6s} "
                  f"{entry.get('tokens_per_s', 0):10.0f} tok/s peak {entry['peak_mem_gb'] or 0:6.1f} GB", flush=True)
            if entry["status"] != "ok":
                break
            seq *= 2
    free_memory(ctx.device)
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=None,
                        help=f"comma list of name@tokens_per_step (default {','.join(DEFAULT_CASES)})")
    parser.add_argument("--precisions", default=None,
                        help=f"comma list (default all: {','.join(ALL_PRECISIONS)}; those the GPU cannot "
                             "run are recorded as skipped with the reason)")
    parser.add_argument("--variant-precisions", default="bf16",
                        help="precisions of the biomoe-cli-* variants (default bf16)")
    parser.add_argument("--contenders", default=",".join(DEFAULT_CONTENDERS),
                        help=f"comma list (default {','.join(DEFAULT_CONTENDERS)}); any of "
                             f"{', '.join([*HF_CONTENDERS, *LOOP_CONTENDERS, *CLI_VARIANTS])}")
    parser.add_argument("--rows", default="",
                        help="comma list of globs over row ids shape@tokens/contender/precision, e.g. "
                             "'mixtral-2layer@16384/*' (the baseline row of each kept shape always runs)")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_CASES[0]}, bf16, 2 warm-up + 5 timed steps")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps per row (default 5)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per row (default 10)")
    parser.add_argument("--config", default=None,
                        help="config every shape's biomoe-cli rows are built from (default: each shape's "
                             f"recipe, {', '.join(f'{k}: configs/{v}' for k, v in SHAPE_RECIPES.items())}, "
                             f"others {DEFAULT_CONFIG.relative_to(DEFAULT_CONFIG.parents[1])})")
    parser.add_argument("--fasta", default=None,
                        help=f"genome the tokens of every row and the biomoe-cli data module read (default "
                             f"{default_fasta()}); 'random' for random bases")
    parser.add_argument("--repeats", type=int, default=None,
                        help="runs of every row, interleaved within a shape (A B C A B C ...); each record "
                             "keeps every run's tokens/s and reports the median (default 3; --quick 1)")
    parser.add_argument("--loop-backend", default=None,
                        help="expert backend of biomoe-loop (default: the config's model.runtime.expert_backend)")
    parser.add_argument("--compile", action="store_true", help="add biomoe-loop-compile and biomoe-cli-compile")
    parser.add_argument("--layer-ablation", action="store_true",
                        help="add biomoe-loop rows with one TE layer component on at a time")
    parser.add_argument("--independent-init", action="store_true",
                        help="biomoe-loop initialises its own weights instead of starting from HF's")
    parser.add_argument("--sweep", action="store_true", help="also the sequence-length sweep on dna-small")
    parser.add_argument("--sweep-start", type=int, default=8192)
    parser.add_argument("--sweep-max", type=int, default=524288)
    parser.add_argument("--profile", default="",
                        help="comma list of non-CLI contenders to profile (torch.profiler) on the first shape")
    parser.add_argument("--list", action="store_true", help="print the row ids and exit")
    inference = parser.add_argument_group("inference rows (biomoe's commands against HF on the same weights)")
    inference.add_argument("--inference", action="store_true",
                           help="after the training rows, time the inference commands (inference.json/.md)")
    inference.add_argument("--inference-only", action="store_true", help="only the inference rows")
    inference.add_argument("--inference-networks", default="genome,dna-small",
                           help="comma list: genome (configs/genome.yaml), dna-small (configs/dna-small.yaml) "
                                "or YAML paths; each config's model.config, randomly initialised")
    inference.add_argument("--inference-tasks", default=",".join(INFERENCE_TASKS),
                           help=f"comma list of {', '.join(INFERENCE_TASKS)} (default all)")
    inference.add_argument("--inference-fasta", default=None,
                           help=f"genome to run on (default {default_fasta()})")
    inference.add_argument("--inference-repeats", type=int, default=3,
                           help="timed runs of each contender, interleaved with HF (default 3)")
    inference.add_argument("--inference-length", type=int, default=2000,
                           help="bases generated per sample (default 2000)")
    inference.add_argument("--inference-samples", default="64,1",
                           help="comma list of generate --num-samples, one row each (default 64,1)")
    inference.add_argument("--inference-variants", type=int, default=4096,
                           help="random SNVs scored by score-variants (default 4096)")
    inference.add_argument("--inference-window", type=int, default=1024,
                           help="bases per window of score-fasta, embed and score-variants (default 1024)")
    inference.add_argument("--inference-kernels", default="default",
                           help="biomoe contenders, comma-separated: default (the commands' own kernels), torch, te "
                                "(every layer component on those kernels); each timed against the same HF runs")
    inference.add_argument("--inference-in-process", action="store_true",
                           help="run the commands and HF inside this process, warm (a diagnostic of the steady "
                                "state); by default each run is a fresh process, as users run them, cold then warm")
    inference.add_argument("--inference-batch-tokens", type=int, default=None,
                           help="tokens per forward pass for the commands that take --batch-tokens and for HF "
                                "(default: the commands' own; HF: biomoe's default for the device)")
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # cpu: tests only
    parser.add_argument("--out", default="results/bench")
    args = parser.parse_args(argv)
    args.inference = args.inference or args.inference_only
    if args.quick:
        args.shapes = args.shapes or ",".join(QUICK_CASES)
        args.precisions = args.precisions or "bf16"
        args.warmup = 2 if args.warmup is None else args.warmup
        args.steps = 5 if args.steps is None else args.steps
        args.repeats = 1 if args.repeats is None else args.repeats
    args.repeats = 3 if args.repeats is None else args.repeats
    args.shapes = args.shapes or ",".join(DEFAULT_CASES)
    args.precisions = args.precisions or ",".join(ALL_PRECISIONS)
    args.warmup = 5 if args.warmup is None else args.warmup
    args.steps = 10 if args.steps is None else args.steps
    return args


def _split(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def build_plan(args: argparse.Namespace) -> list[Row]:
    cases = [parse_case(c) for c in _split(args.shapes)]
    precisions = [parse_precision(p, key="--precisions") for p in _split(args.precisions)]
    variant_precisions = [parse_precision(p, key="--variant-precisions") for p in _split(args.variant_precisions)]
    contenders = _split(args.contenders)
    if args.compile:
        contenders += [c for c in ("biomoe-loop-compile", "biomoe-cli-compile") if c not in contenders]
    if args.layer_ablation:
        contenders += [f"{ABLATION_PREFIX}{c.split('_')[0]} only]" for c in LAYER_COMPONENTS]
    if args.steps < 1 or args.warmup < 0 or args.repeats < 1:
        raise ValueError("--steps and --repeats must be >= 1 and --warmup >= 0")
    return select_rows(plan_rows(cases, contenders, precisions, variant_precisions), _split(args.rows))


def inference_settings(args: argparse.Namespace) -> InferenceSettings:
    return InferenceSettings(
        device=torch.device(args.device), networks=_split(args.inference_networks),
        tasks=_split(args.inference_tasks),
        fasta=Path(args.inference_fasta) if args.inference_fasta else default_fasta(),
        repeats=args.inference_repeats, length=args.inference_length,
        samples=[int(n) for n in _split(args.inference_samples)], variants=args.inference_variants,
        window=args.inference_window, batch_tokens=args.inference_batch_tokens,
        kernels=_split(args.inference_kernels), fresh_process=not args.inference_in_process)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        rows = [] if args.inference_only else build_plan(args)
        inference = inference_settings(args) if args.inference else None
        inference_ids = plan_inference(inference) if inference is not None else []
    except Exception as err:  # bad --shapes / --precisions / --contenders / --inference-*: one line
        print(f"biomoe bench: error: {err}", file=sys.stderr)
        return 2
    if args.list:
        print("\n".join([row.id for row in rows] + [f"inference:{i}" for i in inference_ids]))
        return 0
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("biomoe bench: error: needs a CUDA GPU (it times GPU training and inference)", file=sys.stderr)
        return 2
    config_path = Path(args.config).resolve() if args.config else None
    if config_path is not None and not config_path.is_file():
        print(f"biomoe bench: error: {args.config}: no such config", file=sys.stderr)
        return 2
    fasta = None if args.fasta == "random" else Path(args.fasta) if args.fasta else default_fasta()
    if fasta is not None and not fasta.is_file():
        print(f"biomoe bench: error: --fasta {fasta}: no such file", file=sys.stderr)
        return 2
    out = Path(args.out)
    ctx = BenchContext(device, config_path, args.warmup, args.steps, args.loop_backend, args.independent_init,
                       fasta)
    unsupported = precision_support(device, sorted({row.precision for row in rows}))
    command = " ".join(shlex.quote(a) for a in [Path(sys.executable).name, "-m", "bench",
                                                *(sys.argv[1:] if argv is None else argv)])
    tokens = ("random A/C/G/T ids (seed 0)" if fasta is None else
              f"windows of {fasta.name} at offsets drawn with seed 0")
    settings = {"warmup_steps": args.warmup, "timed_steps": args.steps, "repeats": args.repeats,
                "config": str(args.config) if args.config else {s: f"configs/{c}" for s, c in SHAPE_RECIPES.items()},
                "fasta": None if fasta is None else str(fasta),
                "loop_expert_backend": args.loop_backend or "the shape's config's", "tokens": f"{tokens}, the same "
                "batch every step for every contender of a shape except biomoe-cli, which reads the genome through "
                "its GenomeDataModule", "lr": "1e-4 for HF and biomoe-loop; the config's schedule for biomoe-cli",
                "interleaving": "within a shape, every row runs once per round, rounds repeated --repeats times"}
    contenders = {name: contender_about(name) for name in dict.fromkeys(r.contender for r in rows)}
    env = environment(device)
    started = time.time()
    records: list[BenchRecord] = []

    def save(final: bool = False, extra: dict[str, Any] | None = None) -> None:
        fill_ratios(records)
        report = report_dict(records, command, env, {**settings, "wall_s": round(time.time() - started, 1)},
                             contenders, unsupported, extra)
        write_report(out, report, with_chart=final)

    if rows:
        print(f"biomoe bench: {len(rows)} rows x {args.repeats} runs -> {out}/bench.json", flush=True)
    cases = list(dict.fromkeys(row.shape.case for row in rows))
    for case in cases:
        case_rows = [row for row in rows if row.shape.case == case]
        runs: dict[str, list[BenchRecord]] = {row.id: [] for row in case_rows}
        first_index = len(records)
        for round_index in range(args.repeats):
            for row in case_rows:
                if row.precision in unsupported:
                    if round_index == 0:
                        runs[row.id].append(BenchRecord.for_row(row, status="skipped",
                                                                error=unsupported[row.precision]))
                    continue
                record = measure(row, ctx)
                runs[row.id].append(record)
                print(f"[{case} run {round_index + 1}/{args.repeats}] {row.id:55s} {record.status:7s} "
                      f"{(record.tokens_per_s or 0):10.0f} tok/s peak {(record.peak_mem_gb or 0):6.1f} GB "
                      f"({record.wall_s or 0:.0f} s){'  ' + record.error[:160] if record.error else ''}",
                      flush=True)
            # after every round: a run cut short keeps the rounds that finished
            del records[first_index:]
            records.extend(combine_runs(runs[row.id]) for row in case_rows if runs[row.id])
            save(final=round_index == args.repeats - 1)
        for record in records[first_index:]:
            ratio = ("" if record.ratio_vs_fastest_hf is None else
                     f"{record.ratio_vs_fastest_hf:5.2f}x {record.fastest_hf}")
            spread = ("" if not record.tokens_per_s_range else
                      f" [{record.tokens_per_s_range[0]:.0f}-{record.tokens_per_s_range[1]:.0f}]")
            print(f"{record.id:55s} {record.status:7s} median {(record.tokens_per_s or 0):10.0f} tok/s{spread} {ratio}",
                  flush=True)
    ctx.inits.clear()
    extra: dict[str, Any] = {}
    if args.profile:
        extra["profiles"] = profile_contenders(args, ctx, rows)
    if args.sweep:
        extra["seq_sweep"] = seq_sweep(ctx, args.sweep_start, args.sweep_max,
                                       ctx.expert_backend(SHAPES["dna-small"]))
    if rows or extra:  # --inference-only leaves an earlier bench.json as it is
        save(final=True, extra=extra)
        print((out / "bench.md").read_text())
    if inference is not None:
        free_memory(device)
        print(f"biomoe bench: {len(inference_ids)} inference rows -> {out}/inference.json", flush=True)
        run_inference(inference, out, command, env)
        print((out / "inference.md").read_text())
    return 0


def profile_contenders(args: argparse.Namespace, ctx: BenchContext, rows: list[Row]) -> dict[str, str]:
    """torch.profiler tables (``profile.txt``) of the named loop contenders on the first shape."""
    wanted = _split(args.profile)
    shape = rows[0].shape if rows else parse_case(_split(args.shapes)[0])
    ids, labels = ctx.batch(shape)
    tables = {}
    for name in wanted:
        if name in CLI_VARIANTS:
            tables[name] = "not profiled: biomoe-cli rows run inside Lightning (use its profiler)"
            continue
        free_memory(ctx.device)
        try:
            build, _ = loop_builder(Row(shape, name, "bf16"), ctx)
            tables[name] = profile_steps(build(), ids, labels)
        except Exception as err:
            tables[name] = f"error: {type(err).__name__}: {err}"
        print(tables[name], flush=True)
        free_memory(ctx.device)
    write_text(Path(args.out) / "profile.txt", "\n\n".join(tables.values()) + "\n")
    return tables


if __name__ == "__main__":
    sys.exit(main())
