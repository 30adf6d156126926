"""``python -m biomoe.bench``: HF Mixtral vs biomoe on one GPU, same shapes and tokens, one process.

Writes ``bench.json``, ``bench.md`` and ``bench.png`` into ``--out`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

import torch

from biomoe.bench.models import Contender, ReferenceInit, build_biomoe, build_hf, reference_init
from biomoe.bench.shapes import SHAPES, BenchShape
from biomoe.bench.timing import PEAK_BF16_TFLOPS, StepStats, free_memory, time_training
from biomoe.model.config import LAYER_BACKEND_FIELDS

PRECISIONS = ("bf16", "fp8-current", "fp8-block", "fp8-delayed")


def te_available() -> bool:
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception:
        return False
    return True


def ablation_variants(init: ReferenceInit | None) -> list[tuple[str, Callable]]:
    """biomoe grouped bf16 with the TE layer components switched on one at a time (and none):
    locates a component that changes training, since all start from the same weights."""
    all_torch = {c: "torch" for c in LAYER_BACKEND_FIELDS}
    out = [("biomoe-grouped-bf16[torch layers]",
            lambda s, d: build_biomoe(s, "grouped", "bf16", d, init=init, layer_backends=all_torch))]
    for component in LAYER_BACKEND_FIELDS:
        only = dict(all_torch, **{component: "te"})
        label = f"biomoe-grouped-bf16[te {component.split('_')[0]} only]"
        out.append((label, lambda s, d, o=only: build_biomoe(s, "grouped", "bf16", d, init=init,
                                                              layer_backends=o)))
    return out


def variants(args: argparse.Namespace, init: ReferenceInit | None = None
             ) -> list[tuple[str, Callable[[BenchShape, torch.device], Contender]]]:
    """(label, builder) for every contender this GPU and install can run; biomoe ones start
    from ``init`` (the HF baseline's initial weights) when given."""
    out: list = [("hf-default", lambda s, d: build_hf(s, "grouped_mm", d)),
                 ("hf-default+fused-adamw", lambda s, d: build_hf(s, "grouped_mm", d, fused_adam=True))]
    if not args.skip_hf_eager:
        out.append(("hf-eager", lambda s, d: build_hf(s, "eager", d)))
    backends = args.backends.split(",")
    for backend in backends:
        if backend.startswith("te") and not te_available():
            continue
        precisions = PRECISIONS if backend.startswith("te") or backend == "auto" else ("bf16",)
        if not te_available():
            precisions = ("bf16",)
        for precision in precisions:
            if precision not in args.precisions.split(","):
                continue
            out.append((f"biomoe-{backend}-{precision}",
                        lambda s, d, b=backend, p=precision: build_biomoe(s, b, p, d, init=init)))
    if args.compile:
        out.append(("biomoe-grouped-bf16+compile",
                    lambda s, d: build_biomoe(s, "grouped", "bf16", d, compile_blocks=True, init=init)))
    if args.layer_ablation and te_available():
        out.extend(ablation_variants(init))
    return out


def run_variant(label, builder, shape, device, warmup, steps, ids, labels) -> StepStats:
    free_memory()
    torch.manual_seed(0)  # every contender starts from the same RNG state
    try:
        contender = builder(shape, device)
        stats = time_training(contender, shape, ids, labels, warmup, steps)
        del contender
        return stats
    except torch.OutOfMemoryError:
        return StepStats(label, shape.name, shape.seq, shape.micro_batch, 0, float("nan"), 0.0, 0.0, 0.0,
                         torch.cuda.max_memory_allocated() / 2**30, float("nan"), "OOM")
    except Exception as err:  # report and continue: one broken variant must not hide the others
        traceback.print_exc()
        return StepStats(label, shape.name, shape.seq, shape.micro_batch, 0, float("nan"), 0.0, 0.0, 0.0,
                         0.0, float("nan"), f"error: {type(err).__name__}: {err}"[:200])
    finally:
        free_memory()


def random_tokens(shape: BenchShape, device: torch.device, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random nucleotide ids (A/C/G/T = 4..7); labels are the next base. The same for every variant."""
    gen = torch.Generator().manual_seed(seed)
    seq = torch.randint(4, 8, (shape.micro_batch, shape.seq + 1), generator=gen)
    return seq[:, :-1].contiguous().to(device), seq[:, 1:].contiguous().to(device)


def seq_sweep(args, device) -> list[StepStats]:
    """Longest trainable sequence on dna-small at micro-batch 1: HF default vs biomoe (+AC)."""
    base = SHAPES["dna-small"]
    contenders = {
        "hf-default": lambda s, d: build_hf(s, "grouped_mm", d),
        "biomoe-ac": lambda s, d: build_biomoe(s, args.sweep_backend, "bf16", d, activation_checkpointing=True),
    }
    results = []
    for label, builder in contenders.items():
        seq = args.sweep_start
        while seq <= args.sweep_max:
            shape = base.with_seq(seq, 1)
            ids, labels = random_tokens(shape, device)
            stats = run_variant(label, builder, shape, device, 1, 1, ids, labels)  # fits? then how fast
            stats.variant = label
            results.append(stats)
            print(f"sweep {label:12s} seq={seq:>8d} {stats.status:6s} "
                  f"{stats.tokens_per_s:10.0f} tok/s peak {stats.peak_mem_gb:6.1f} GB", flush=True)
            if stats.status != "ok":
                break
            seq *= 2
    return results


def markdown_table(rows: list[StepStats], baseline: StepStats | None) -> str:
    lines = ["| variant | shape | seq×batch | tokens/s | vs HF default | TFLOP/s | MFU | peak GB | first → final loss | status |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        ratio = r.tokens_per_s / baseline.tokens_per_s if baseline and baseline.tokens_per_s else float("nan")
        first = r.losses[0] if r.losses else float("nan")
        lines.append(f"| {r.variant} | {r.shape} | {r.seq}×{r.micro_batch} | {r.tokens_per_s:,.0f} | "
                     f"{ratio:.2f}× | {r.tflops:.0f} | {r.mfu:.1%} | {r.peak_mem_gb:.1f} | "
                     f"{first:.3f} → {r.final_loss:.3f} | {r.status} |")
    return "\n".join(lines)


def bar_chart(rows: list[StepStats], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.status == "ok"]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(ok) + 1.5))
    colors = ["#888888" if r.variant.startswith("hf") else "#2b7bb9" for r in ok]
    ax.barh([r.variant for r in ok], [r.tokens_per_s / 1e3 for r in ok], color=colors)
    for i, r in enumerate(ok):
        ax.text(r.tokens_per_s / 1e3, i, f" {r.tokens_per_s / 1e3:.0f}k ({r.peak_mem_gb:.0f} GB)", va="center")
    ax.invert_yaxis()
    ax.set_xlabel("training tokens / s (median, CUDA events)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def environment() -> dict:
    info = {"python": platform.python_version(), "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "peak_bf16_tflops_reference": PEAK_BF16_TFLOPS, "flop_formula": BenchShape.FLOP_FORMULA}
    for name in ("transformers", "transformer_engine", "lightning"):
        try:
            info[name] = __import__(name).__version__
        except Exception:
            info[name] = None
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="biomoe bench", description=__doc__)
    parser.add_argument("--shapes", default="mixtral-2layer,dna-small")
    parser.add_argument("--backends", default="loop,grouped,te,te_fused,auto")
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--skip-hf-eager", action="store_true")
    parser.add_argument("--compile", action="store_true", help="add a torch.compile'd biomoe variant")
    parser.add_argument("--layer-ablation", action="store_true",
                        help="add biomoe grouped-bf16 variants with each TE layer component alone")
    parser.add_argument("--independent-init", action="store_true",
                        help="let biomoe initialise its own weights instead of starting from HF's")
    parser.add_argument("--sweep", action="store_true", help="sequence-length sweep on dna-small")
    parser.add_argument("--sweep-start", type=int, default=8192)
    parser.add_argument("--sweep-max", type=int, default=524288)
    parser.add_argument("--sweep-backend", default="grouped")
    parser.add_argument("--profile", default="", help="comma list of variant labels to profile "
                        "on the first shape, e.g. hf-default,biomoe-grouped-bf16")
    parser.add_argument("--out", default="results/bench")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("biomoe bench: error: needs a CUDA GPU (it times GPU training steps)", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(BenchShape.FLOP_FORMULA)
    results: list[StepStats] = []
    started = time.time()
    for shape_name in args.shapes.split(","):
        shape = SHAPES[shape_name]
        ids, labels = random_tokens(shape, device)
        init = None if args.independent_init else reference_init(shape, device)
        for label, builder in variants(args, init):
            stats = run_variant(label, builder, shape, device, args.warmup, args.steps, ids, labels)
            stats.variant = label
            results.append(stats)
            (out / "partial.json").write_text(json.dumps([r.as_dict() for r in results], indent=1))
            print(f"{shape.name:15s} {label:28s} {stats.status:6s} {stats.tokens_per_s:10.0f} tok/s "
                  f"{stats.tflops:6.0f} TFLOP/s peak {stats.peak_mem_gb:6.1f} GB loss "
                  + " ".join(f"{v:.3f}" for v in stats.losses), flush=True)
        del init
    if args.profile:
        from biomoe.bench.profile import profile_steps

        shape = SHAPES[args.shapes.split(",")[0]]
        ids, labels = random_tokens(shape, device)
        wanted = set(args.profile.split(","))
        for label, builder in variants(args):
            if label in wanted:
                free_memory()
                text = profile_steps(builder(shape, device), ids, labels)
                print(text, flush=True)
                with open(out / "profile.txt", "a") as handle:
                    handle.write(text + "\n")
                free_memory()
    sweep = seq_sweep(args, device) if args.sweep else []
    report = {"environment": environment(), "command": " ".join(sys.argv), "results": [r.as_dict() for r in results],
              "seq_sweep": [r.as_dict() for r in sweep], "wall_s": time.time() - started}
    (out / "bench.json").write_text(json.dumps(report, indent=2))
    sections = []
    for shape_name in args.shapes.split(","):
        rows = [r for r in results if r.shape == shape_name]
        baseline = next((r for r in rows if r.variant == "hf-default" and r.status == "ok"), None)
        sections.append(f"### {shape_name}\n\n" + markdown_table(rows, baseline))
        if rows:
            bar_chart(rows, out / f"bench-{shape_name}.png", f"{shape_name} on {report['environment']['gpu']}")
    if sweep:
        sections.append("### sequence-length sweep (dna-small, micro-batch 1)\n\n" + markdown_table(sweep, None))
    start = ("every biomoe variant starts from the HF baseline's initial weights (converted)"
             if not args.independent_init else "each model initialises its own weights")
    text = (f"GPU: {report['environment']['gpu']}; torch {torch.__version__}; "
            f"MFU against {PEAK_BF16_TFLOPS:.0f} TFLOP/s.\n{BenchShape.FLOP_FORMULA}\n"
            f"Loss: the same random batch every step, lr 1e-4; {start}; biomoe's loss adds "
            "0.01·aux + 0.001·z-loss, HF's is cross-entropy only.\n\n" + "\n\n".join(sections))
    (out / "bench.md").write_text(text + "\n")
    print("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
