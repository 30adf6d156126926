"""``bench.json``, ``bench.md`` and ``bench.png``: written atomically (:mod:`biomoe.files`), rewritten
after every row, so a run cut short by a time limit still leaves every finished row on disk."""

from __future__ import annotations

import json
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from bench.records import BASELINE, HF_STRONGEST, BenchRecord, fastest_hf
from bench.shapes import BenchShape
from bench.timing import PEAK_BF16_TFLOPS
from biomoe.files import save_figure, write_text

TIMING_NOTE = ("tokens/s = tokens per step / median step time over the timed steps after warm-up, the median "
               "of the row's runs (interleaved with the other rows of its shape; range = slowest and fastest run); "
               "a step is timed from its start to the next step's start with CUDA events (for biomoe-cli: "
               "Lightning's on_train_batch_start of consecutive batches, so the data loader, every hook, "
               "callback and logger call between steps is included); peak_mem_gb is "
               "torch.cuda.max_memory_allocated over the whole row (reset before it); host ms = host time of one "
               "untimed step started with the device drained (how long issuing a step takes: near the step time "
               "the step is bound by the host, well below it by the GPU); kernels = GPU kernels of one untimed step "
               "after the timed ones (torch.profiler, memcpy/memset not counted)")
MFU_NOTE = (f"mfu = model TFLOP/s / {PEAK_BF16_TFLOPS:.0f} TFLOP/s (the dense bf16 matmul rate measured on an H200, "
            "whatever GPU ran the row) "
            "for every precision, FP8 included")


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except Exception:
        return None


def environment(device: torch.device | None = None) -> dict[str, Any]:
    """Versions, GPU name, git commit and the date (UTC): what a number in the report depends on."""
    if device is None:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    info: dict[str, Any] = {
        "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "transformer_engine": _version("transformer_engine") if device.type == "cuda" else None,
        "transformers": _version("transformers"), "lightning": _version("lightning"),
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "date": datetime.now(timezone.utc).date().isoformat(),
    }
    try:
        info["biomoe_commit"] = subprocess.run(
            ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=10,
            cwd=Path(__file__).resolve().parents[1]).stdout.strip() or None
    except Exception:
        info["biomoe_commit"] = None
    return info


def report_dict(records: list[BenchRecord], command: str, env: dict[str, Any], settings: dict[str, Any],
                contenders: dict[str, str], skipped_precisions: dict[str, str],
                extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"command": command, "environment": env, "baseline": BASELINE, "strongest_hf_set": list(HF_STRONGEST),
            "fastest_hf": {case: r.contender for case, r in fastest_hf(records).items()},
            "flop_formula": BenchShape.FLOP_FORMULA, "peak_tflops_for_mfu": PEAK_BF16_TFLOPS,
            "mfu_note": MFU_NOTE, "timing": TIMING_NOTE, "settings": settings, "contenders": contenders,
            "skipped_precisions": skipped_precisions, "records": [r.as_dict() for r in records],
            **(extra or {})}


def _num(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    records = [BenchRecord(**r) for r in report["records"]]
    lines = [f"# biomoe bench on {env.get('gpu') or 'CPU'}", "",
             f"torch {env.get('torch')}, Transformer Engine {env.get('transformer_engine')}, "
             f"transformers {env.get('transformers')}, Lightning {env.get('lightning')}, "
             f"Python {env.get('python')}, biomoe {env.get('biomoe_commit')}.", "",
             f"Command: `{report['command']}`", "",
             f"- Baseline: the fastest of HF's configurations measured on the same shape and tokens per step "
             f"({', '.join(f'`{c}`' for c in HF_STRONGEST)}; the winner is named above each table); "
             f"`vs {BASELINE}` is against that one configuration.",
             f"- {report['flop_formula']}.", f"- {report['mfu_note']}.", f"- Timing: {report['timing']}.", ""]
    lines += ["Contenders:", ""] + [f"- `{name}`: {about}" for name, about in report["contenders"].items()]
    cases = list(dict.fromkeys(r.case for r in records))
    for case in cases:
        rows = [r for r in records if r.case == case]
        first = rows[0]
        winner = next((r.fastest_hf for r in rows if r.fastest_hf), None)
        lines += ["", f"## {first.shape}, {first.tokens_per_step:,} tokens per step "
                      f"(seq {first.seq} × micro-batch {first.micro_batch})", "",
                  f"Fastest HF configuration (the baseline): `{winner}`." if winner else
                  "No HF configuration measured: no baseline.", "",
                  "| contender | precision | tokens/s (median) | range | runs | vs fastest HF | vs HF bf16 fused "
                  "| TFLOP/s | MFU | peak GB | step ms | host ms | kernels | status |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for r in rows:
            if r.status == "skipped":
                continue
            status = r.status if r.status == "ok" else f"{r.status}: {(r.error or '')[:120]}"
            ratio = "—" if r.ratio_vs_hf_bf16_fused is None else f"{r.ratio_vs_hf_bf16_fused:.2f}×"
            best = "—" if r.ratio_vs_fastest_hf is None else f"{r.ratio_vs_fastest_hf:.2f}×"
            spread = ("—" if not r.tokens_per_s_range else
                      f"{r.tokens_per_s_range[0]:,.0f}–{r.tokens_per_s_range[1]:,.0f}")
            lines.append(f"| {r.contender} | {r.precision} | {_num(r.tokens_per_s, ',.0f')} | {spread} | "
                         f"{len(r.runs) or (1 if r.status == 'ok' else 0)} | {best} | {ratio} | "
                         f"{_num(r.tflops, '.0f')} | {_num(None if r.mfu is None else 100 * r.mfu, '.1f')}"
                         f"{'' if r.mfu is None else ' %'} | {_num(r.peak_mem_gb, '.1f')} | "
                         f"{_num(r.step_ms, '.1f')} | {_num(r.host_ms, '.1f')} | "
                         f"{_num(r.kernels_per_step, ',d')} | {status} |")
        skipped = [r for r in rows if r.status == "skipped"]
        if skipped:
            lines += ["", "Not run here: " + ", ".join(f"{r.contender}/{r.precision}" for r in skipped) + "."]
    if report.get("skipped_precisions"):
        lines += ["", "## Precisions this GPU cannot run", ""]
        lines += [f"- `{name}`: {why}" for name, why in report["skipped_precisions"].items()]
    return "\n".join(lines) + "\n"


def chart(records: list[BenchRecord], path: Path, title: str) -> None:
    """One panel per shape: tokens/s of every measured row, HF grey, biomoe blue."""
    import matplotlib  # optional dependency

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional dependency

    cases = list(dict.fromkeys(r.case for r in records if r.status == "ok"))
    if not cases:
        return
    panels = [[r for r in records if r.case == c and r.status == "ok"] for c in cases]
    height = sum(0.32 * len(p) + 0.9 for p in panels) + 0.6
    fig, axes = plt.subplots(len(cases), 1, figsize=(10, height), squeeze=False,
                             gridspec_kw={"height_ratios": [len(p) + 1 for p in panels]})
    for ax, case, rows in zip(axes[:, 0], cases, panels):
        labels = [f"{r.contender} {r.precision}" for r in rows]
        values = [r.tokens_per_s / 1e3 for r in rows]
        colors = ["#888888" if r.contender.startswith("hf") else "#2b7bb9" for r in rows]
        spreads = [[(r.tokens_per_s - r.tokens_per_s_range[0]) / 1e3 if r.tokens_per_s_range else 0 for r in rows],
                   [(r.tokens_per_s_range[1] - r.tokens_per_s) / 1e3 if r.tokens_per_s_range else 0 for r in rows]]
        ax.barh(labels, values, color=colors, xerr=spreads, error_kw={"elinewidth": 0.8, "capsize": 2})
        for i, r in enumerate(rows):
            ratio = "" if r.ratio_vs_fastest_hf is None else f" {r.ratio_vs_fastest_hf:.2f}×"
            ax.text(values[i], i, f" {values[i]:.0f}k{ratio}", va="center", fontsize=8)
        ax.invert_yaxis()
        ax.set_title(case, fontsize=10)
        ax.set_xlim(0, max(values) * 1.25)
        ax.tick_params(axis="y", labelsize=8)
    axes[-1, 0].set_xlabel("training tokens / s (thousands; median of the runs, whiskers their range)")
    fig.suptitle(title)
    fig.tight_layout()
    try:
        save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)


def write_report(out: Path, report: dict[str, Any], with_chart: bool) -> None:
    write_text(out / "bench.json", json.dumps(report, indent=2) + "\n")
    write_text(out / "bench.md", markdown(report))
    if with_chart:
        records = [BenchRecord(**r) for r in report["records"]]
        gpu = report["environment"].get("gpu") or "CPU"
        chart(records, out / "bench.png", f"biomoe vs HF Mixtral on {gpu}")
