"""``python -m bench.docs_tables``: the measurement tables of README.md and docs/ rendered from results/.

A table in a document sits between ``<!-- table:NAME -->`` and ``<!-- /table -->``; its text is what
:data:`TABLES` renders from the results files it names, with the machine, date and software read
from them. ``--check`` changes nothing and exits 1 naming every table that differs from its files
and every headline figure in prose that disagrees with its file (:mod:`bench.docs_headlines`; the
CPU test suite runs the same checks); without it the tables are rewritten in place.

    python -m bench.docs_tables            # re-render every marked table (make docs-tables)
    python -m bench.docs_tables --check    # exit 1 if a document's table is not what its files say
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bench.docs_headlines import HeadlineSourceError, headline_problems
from bench.records import HF_STRONGEST, BenchRecord, fastest_hf

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ("README.md", "docs/*.md", "results/bench/sweep/README.md")
OPENING = re.compile(r"<!-- table:[a-z0-9-]+ -->")
MARKER = re.compile(r"(<!-- table:(?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)

DATES_NOT_IN_FILE = {
    "results/bench/bench.json": "2026-12-01",
    "results/bench/recipes-all-shapes/bench.json": "2026-12-03",
    "results/bench/sweep/small-shapes.json": "2026-12-03",
    "results/bench/sweep/mixtral.json": "2026-12-03",
    "results/experts/speed/speed.json": "2026-12-06 to 2026-12-07",
    "results/bench/inference-gpu/score-embed.json": "2026-12-06",
    "results/bench/inference-gpu/variants-generate.json": "2026-12-06",
    "results/experts/speed-quack/speed.json": "2026-12-07",
    "results/bench/bare-loop/bench.json": "2026-11-29",
    "results/bench/compile/bench.json": "2026-11-29",
}
"""Reports written before the bench recorded the date: the day of the commit that added each one
(its folder's README says the same). A report that records ``environment.date`` is read instead."""


class DocsTableError(Exception):
    """A results file or a marked table that cannot be rendered: one line naming it."""


@dataclass(frozen=True)
class Report:
    path: str
    data: dict[str, Any]

    @property
    def records(self) -> list[BenchRecord]:
        if not isinstance(self.data.get("records"), list):
            raise DocsTableError(f"{self.path}: not a bench report (no 'records' list)")
        return [BenchRecord(**r) for r in self.data["records"]]

    @property
    def date(self) -> str:
        recorded = self.data.get("environment", {}).get("date") or str(self.data.get("date", ""))[:10]
        if recorded:
            return recorded
        if self.path not in DATES_NOT_IN_FILE:
            raise DocsTableError(f"{self.path}: records no date (environment.date)")
        return DATES_NOT_IN_FILE[self.path]

    def gpu(self) -> str:
        gpu = self.data.get("environment", {}).get("gpu") or self.data.get("machine")
        if not gpu:
            raise DocsTableError(f"{self.path}: records no GPU (environment.gpu or machine)")
        return gpu

    def machine(self) -> str:
        env = self.data.get("environment", {})
        if not env.get("gpu"):
            raise DocsTableError(f"{self.path}: records no GPU (environment.gpu)")
        return (f"one {env['gpu']}, {self.date}; torch {env.get('torch')}, Transformer Engine "
                f"{env.get('transformer_engine')}, transformers {env.get('transformers')}")


def read_report(path: str, root: Path = ROOT) -> Report:
    file = root / path
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        raise DocsTableError(f"{path}: no such results file") from None
    except json.JSONDecodeError as err:
        raise DocsTableError(f"{path}: not JSON ({err.msg}, line {err.lineno})") from None
    if not isinstance(data, dict):
        raise DocsTableError(f"{path}: not a JSON object")
    return Report(path, data)


# ----------------------------------------------------------------------------- cells
def kilo(value: float) -> str:
    return f"{value / 1e3:,.1f}k"


def ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def spread(record: BenchRecord) -> str:
    low, high = record.tokens_per_s_range or (record.tokens_per_s, record.tokens_per_s)
    return f"{low / 1e3:,.1f}–{high / 1e3:,.1f}k"


def shape_label(record: BenchRecord) -> str:
    return f"{record.shape}, {record.tokens_per_step:,} tok/step"


def pick(records: list[BenchRecord], case: str, contender: str, precision: str = "bf16") -> BenchRecord | None:
    for r in records:
        if r.case == case and r.contender == contender and r.precision == precision and r.status == "ok":
            return r
    return None


def best_fp8(records: list[BenchRecord], case: str, contender: str) -> BenchRecord | None:
    fp8 = [r for r in records if r.case == case and r.contender == contender and r.status == "ok"
           and r.precision.startswith("fp8") and r.tokens_per_s]
    return max(fp8, key=lambda r: r.tokens_per_s) if fp8 else None


def cases(records: list[BenchRecord]) -> list[str]:
    return list(dict.fromkeys(r.case for r in records))


def against(record: BenchRecord | None, base: BenchRecord | None, with_range: bool = False,
            with_precision: bool = False) -> str:
    """``575.4k (1.24×; 471–626k)``: the row's median, its ratio to ``base``, its range."""
    if record is None:
        return "—"
    parts = [ratio(record.tokens_per_s / base.tokens_per_s if base else None)]
    if with_precision:
        parts[0] += f", {record.precision}"
    if with_range and len(record.runs) > 1:
        parts.append(spread(record))
    return f"{kilo(record.tokens_per_s)} ({'; '.join(parts)})"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    align = ["---"] + ["---:"] * (len(header) - 1)
    return ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |",
            *("| " + " | ".join(row) + " |" for row in rows)]


def hf_configurations_run(records: list[BenchRecord]) -> str:
    ran = [c for c in HF_STRONGEST if any(r.contender == c and r.status == "ok" for r in records)]
    missing = [c for c in HF_STRONGEST if c not in ran]
    text = f"HF configurations run: {', '.join(f'`{c}`' for c in ran)}"
    if not missing:
        return text
    return (text + f"; not run: {', '.join(f'`{c}`' for c in missing)}, so these ratios are not against "
            "the fastest HF configuration and await re-measurement")


# ----------------------------------------------------------------------------- the tables
def _sweep_table(reports: list[Report], header: list[str],
                 cells: Callable[[list[BenchRecord], str, BenchRecord | None], list[str]], lead: str) -> str:
    """A sweep's table: per shape, its fastest HF row and ``cells(records, case, base)``; the footer
    gives the run count, the machine, the HF configurations run and the files."""
    records = [r for rep in reports for r in rep.records]
    rows = []
    for case in cases(records):
        base = fastest_hf([r for r in records if r.case == case]).get(case)
        first = next(r for r in records if r.case == case)
        rows.append([shape_label(first), f"{kilo(base.tokens_per_s)} (`{base.contender}`)" if base else "—"]
                    + cells(records, case, base))
    repeats = {rep.data["settings"].get("repeats") for rep in reports}
    lines = table(["shape", "fastest HF row of the run"] + header, rows)
    lines += ["", f"{lead.format(runs=', '.join(str(n) for n in sorted(repeats)))}; {reports[0].machine()}. "
              f"{hf_configurations_run(records)}. Files: " + ", ".join(f"`{rep.path}`" for rep in reports) + "."]
    return "\n".join(lines) + "\n"


def sweep_headline(reports: list[Report]) -> str:
    """The latest full sweep: medians of interleaved runs, every shape, against the fastest HF row."""
    def cells(records: list[BenchRecord], case: str, base: BenchRecord | None) -> list[str]:
        return [against(pick(records, case, "biomoe-cli"), base, with_range=True),
                against(best_fp8(records, case, "biomoe-cli"), base, with_precision=True),
                against(pick(records, case, "biomoe-loop"), base)]

    return _sweep_table(reports, ["**`cli.py fit`, bf16** (ratio; range)", "`cli.py fit`, best FP8", "bare loop bf16"],
                        cells, "Medians of {runs} runs per row, interleaved with the other rows of the shape")


def sweep_columns(reports: list[Report]) -> str:
    """The latest full sweep with every variant it ran: what each part of the product path costs."""
    def cells(records: list[BenchRecord], case: str, base: BenchRecord | None) -> list[str]:
        ranged = [against(pick(records, case, c), base, with_range=True) for c in (
            "biomoe-cli", "biomoe-cli-repeated", "biomoe-cli-nomaster", "biomoe-loop", "biomoe-loop-graph")]
        return ranged + [against(best_fp8(records, case, c), base, with_precision=True)
                         for c in ("biomoe-cli", "biomoe-loop")]

    return _sweep_table(reports, ["`cli.py fit` bf16", "fit, repeated batch", "fit, no master weights", "bare loop",
                                  "bare loop, one CUDA graph", "fit, best FP8", "bare loop, best FP8"], cells,
                        "Tokens/s, medians of {runs} runs per row (range where several), ratio to the fastest HF "
                        "row of the shape")


def single_run(reports: list[Report]) -> str:
    """An older sweep of one run per row: every variant, labelled as single runs."""
    (rep,) = reports
    records = rep.records
    rows = []
    for case in cases(records):
        base = fastest_hf([r for r in records if r.case == case]).get(case)
        first = next(r for r in records if r.case == case)

        def cell(contender: str, case: str = case, base: BenchRecord | None = base) -> str:
            return against(pick(records, case, contender), base)

        rows.append([shape_label(first), kilo(pick(records, case, "hf-bf16-fused").tokens_per_s),
                     kilo(pick(records, case, "hf-eager").tokens_per_s), cell("biomoe-cli"),
                     against(best_fp8(records, case, "biomoe-cli"), base, with_precision=True),
                     cell("biomoe-cli-compile"), cell("biomoe-cli-nomaster"), cell("biomoe-cli-nocallbacks"),
                     cell("biomoe-loop"), against(best_fp8(records, case, "biomoe-loop"), base, with_precision=True)])
    steps = rep.data["settings"].get("timed_steps")
    lines = table(["shape", "HF grouped_mm", "HF eager", "`cli.py fit` bf16", "fit, best FP8", "-compile",
                   "-nomaster", "-nocallbacks", "bare loop bf16", "bare loop, best FP8"], rows)
    lines += ["", f"One run per row ({steps} timed steps, the median step), not a median of runs; ratios "
              f"against the faster of the two HF rows of the shape; {rep.machine()}. "
              f"{hf_configurations_run(records)}. File: `{rep.path}`."]
    return "\n".join(lines) + "\n"


def _short_shape(record: BenchRecord) -> str:
    return f"{record.shape}, {record.tokens_per_step:,}"


def single_run_memory(reports: list[Report]) -> str:
    """Peak memory of the single-run sweep's bf16 rows (each row's own peak)."""
    (rep,) = reports
    records = rep.records
    contenders = ("hf-bf16-fused", "biomoe-cli", "biomoe-cli-nomaster", "biomoe-loop")
    rows = []
    for case in cases(records):
        first = next(r for r in records if r.case == case)
        picked = [pick(records, case, c) for c in contenders]
        rows.append([_short_shape(first)] + [f"{r.peak_mem_gb:.1f}" if r and r.peak_mem_gb else "—" for r in picked])
    lines = table(["shape", "HF bf16 fused", "biomoe-cli", "-nomaster", "biomoe-loop"], rows)
    lines += ["", f"Peak GB, bf16, one run per row; {rep.machine()}. File: `{rep.path}`."]
    return "\n".join(lines) + "\n"


STEP_TIME_ROWS = (  # (label, contender, contender whose time this row adds to, or None)
    ("bare loop: model, fused AdamW on bf16 weights, no clipping, no Lightning", "biomoe-loop", None),
    ("+ Lightning's loop, shipped callbacks and logging, gradient clipping (`-nomaster`)", "biomoe-cli-nomaster",
     "biomoe-loop"),
    ("+ fp32 master weights in TE's fused AdamW (`biomoe-cli`)", "biomoe-cli", "biomoe-cli-nomaster"),
)


def single_run_step_time(reports: list[Report]) -> str:
    """Where the single-run sweep's step time goes, taking one thing away at a time (median step, bf16)."""
    (rep,) = reports
    records = rep.records
    shapes = cases(records)

    def ms(case: str, contender: str) -> float | None:
        r = pick(records, case, contender)
        return r.step_ms if r else None

    rows = []
    for label, contender, before in STEP_TIME_ROWS:
        cells = []
        for case in shapes:
            now, prior = ms(case, contender), ms(case, before) if before else None
            cells.append("—" if now is None else f"{now:.1f} ms" + (f" ({now - prior:+.1f})" if prior else ""))
        rows.append([label] + cells)
    callbacks = [(ms(c, "biomoe-cli"), ms(c, "biomoe-cli-nocallbacks")) for c in shapes]
    rows.append(["the shipped callbacks alone (`biomoe-cli` − `-nocallbacks`)"]
                + [f"{a - b:.1f} ms" if a and b else "—" for a, b in callbacks])
    rows.append(["HF bf16, fused AdamW, no clipping"]
                + [f"{v:.1f} ms" if (v := ms(c, "hf-bf16-fused")) else "—" for c in shapes])
    firsts = [next(r for r in records if r.case == c) for c in shapes]
    lines = table([""] + [_short_shape(f) for f in firsts], rows)
    lines += ["", f"Median step of one run per row, bf16; {rep.machine()}. File: `{rep.path}`."]
    return "\n".join(lines) + "\n"


BARE_LOOP_LABELS = {
    "hf-default": "HF default (grouped_mm experts, torch AdamW defaults = foreach)",
    "hf-default+fused-adamw": "HF default + fused AdamW",
    "hf-eager": "HF eager experts loop",
}


def _bare_loop_label(variant: str) -> str:
    """``biomoe-te_fused-fp8-block`` -> ``biomoe `te_fused`, fp8-block``; HF's rows by name."""
    if variant in BARE_LOOP_LABELS:
        return BARE_LOOP_LABELS[variant]
    name, _, extra = variant.partition("+")
    backend, precision = name.removeprefix("biomoe-").split("-", 1)
    label = f"biomoe `{backend}`, {precision}"
    return label + (f" + `torch.{extra}`" if extra else "")


def bare_loop_variants(reports: list[Report], shape: str) -> str:
    """One shape of the earlier bare-loop benchmark (one process, fixed batch): every variant's rate
    against HF's default configuration, its TFLOP/s, MFU and peak memory."""
    (rep,) = reports
    rows_in = [r for r in rep.data.get("results", []) if r.get("shape") == shape]
    if not rows_in:
        raise DocsTableError(f"{rep.path}: no {shape} rows")
    base = next((r for r in rows_in if r["variant"] == "hf-default" and r["status"] == "ok"), None)
    if base is None:
        raise DocsTableError(f"{rep.path}: no hf-default row for {shape}")
    best = max((r for r in rows_in if r["status"] == "ok"), key=lambda r: r["tokens_per_s"])
    rows = []
    for r in rows_in:
        if r["status"] != "ok":
            rows.append([_bare_loop_label(r["variant"]), r["status"], "", "", "", ""])
            continue
        rate = f"{r['tokens_per_s']:,.0f}"
        vs = f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}×"
        if r is best:
            rate, vs = f"**{rate}**", f"**{vs}**"
        rows.append([_bare_loop_label(r["variant"]), rate, vs, f"{r['tflops']:.0f}", f"{100 * r['mfu']:.1f}%",
                     f"{r['peak_mem_gb']:.1f}"])
    lines = table(["variant", "tokens/s", "vs HF default", "TFLOP/s", "MFU", "peak GB"], rows)
    lines += ["", f"Median step, one run per variant; one {rep.gpu()}, {rep.date}; torch "
              f"{rep.data.get('environment', {}).get('torch')}. File: `{rep.path}`."]
    return "\n".join(lines) + "\n"


SEQ_SWEEP_LABELS = {"hf-default": "HF default", "biomoe-ac": "biomoe with activation checkpointing"}


def longest_sequence(reports: list[Report]) -> str:
    """The earlier bare-loop benchmark's sequence sweep: the longest sequence each contender trains,
    its peak memory and rate there, and what stopped it (memory, or the sweep's maximum)."""
    (rep,) = reports
    sweep = rep.data.get("seq_sweep")
    if not isinstance(sweep, list) or not sweep:
        raise DocsTableError(f"{rep.path}: no sequence sweep ('seq_sweep')")
    longest_tried = max(r["seq"] for r in sweep)
    rows = []
    for variant in dict.fromkeys(r["variant"] for r in sweep):
        runs = sorted((r for r in sweep if r["variant"] == variant), key=lambda r: r["seq"])
        trained = [r for r in runs if r["status"] == "ok"]
        if not trained:
            rows.append([SEQ_SWEEP_LABELS.get(variant, variant), "none", "", ""])
            continue
        best = trained[-1]
        failed = next((r for r in runs if r["seq"] > best["seq"] and r["status"] != "ok"), None)
        why = (f" ({failed['seq']:,} runs out of memory)" if failed and failed["status"] == "OOM"
               else f" ({failed['seq']:,}: {failed['status']})" if failed
               else " (the sweep's maximum)" if best["seq"] == longest_tried else "")
        rows.append([SEQ_SWEEP_LABELS.get(variant, variant), f"{best['seq']:,}{why}", f"{best['peak_mem_gb']:.1f}",
                     f"{best['tokens_per_s']:,.0f}"])
    lines = table(["", "longest that trains", "peak GB", "tokens/s there"], rows)
    lines += ["", f"One {rep.gpu()}, {rep.date}. File: `{rep.path}` (`seq_sweep`: every length tried)."]
    return "\n".join(lines) + "\n"


def recipes(reports: list[Report]) -> str:
    """The recipes on the real data module, medians of interleaved runs."""
    (rep,) = reports
    records = rep.records
    rows = []
    for case in cases(records):
        base = fastest_hf([r for r in records if r.case == case]).get(case)
        fit = pick(records, case, "biomoe-cli")
        first = next(r for r in records if r.case == case)
        rows.append([shape_label(first), kilo(base.tokens_per_s) if base else "—",
                     against(fit, base, with_range=True), against(pick(records, case, "biomoe-cli-repeated"), base),
                     against(pick(records, case, "biomoe-loop"), base),
                     f"{fit.peak_mem_gb:.1f} / {base.peak_mem_gb:.1f}" if fit and base else "—"])
    lines = table(["shape", "HF grouped_mm", "`cli.py fit`, real data (ratio; range)", "repeated batch",
                   "bare loop", "peak GB, fit / HF"], rows)
    lines += ["", f"Medians of {rep.data['settings'].get('repeats')} runs per row, interleaved; {rep.machine()}. "
              f"{hf_configurations_run(records)}. File: `{rep.path}`."]
    return "\n".join(lines) + "\n"


EXPERT_SIZES = {"base": "base (hidden 512, 8 layers)", "4x": "4x (hidden 1,024, 8 layers)"}
EXPERT_VARIANTS = {"dense": "dense", "moe": "moe (8 experts, top-2)", "fine": "fine (32 experts, top-8)",
                   "fine64": "fine64 (64 experts, top-8)"}


def _speed_rows(rep: Report) -> dict[tuple[str, str, str], dict]:
    """The measured rows of a ``bench.experts speed`` file by (size, variant, kernels)."""
    rows_in = rep.data.get("contenders")
    if not isinstance(rows_in, list):
        raise DocsTableError(f"{rep.path}: not an expert speed table (no 'contenders' list)")
    return {(r["size"], r["variant"], r["kernels"]): r for r in rows_in if "tokens_per_s" in r}


def expert_speed(reports: list[Report]) -> str:
    """Each model alone, torch's and TE's layer kernels side by side (``bench.experts speed``)."""
    (rep,) = reports
    by = _speed_rows(rep)

    def cells(row: dict | None, with_detail: bool) -> list[str]:
        if row is None:
            return ["–", "–"] + (["–", "–"] if with_detail else [])
        runs = sum("tokens_per_s" in run for run in row["runs"])
        rate = f"{row['tokens_per_s'] / 1e3:,.0f}k" + (f" ({runs} runs)" if runs != 3 else "")
        out = [rate, f"{row['vs_dense']:.2f}x"]
        return out + [f"{100 * row['mfu']:.1f} %", f"{row['peak_memory_gib']:.1f} GiB"] if with_detail else out

    rows = []
    for size, size_label in EXPERT_SIZES.items():
        for i, (variant, label) in enumerate(EXPERT_VARIANTS.items()):
            torch_row, te_row = by.get((size, variant, "torch")), by.get((size, variant, "te"))
            if torch_row is None and te_row is None:
                continue
            rows.append([size_label if i == 0 else "", label, *cells(torch_row, True), *cells(te_row, False)])
    lines = table(["size", "model", "torch layers: tokens/s", "vs dense", "MFU", "peak", "TE layers: tokens/s",
                   "vs dense"], rows)
    lines[1] = "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    lines += ["", f"Medians of the runs of each row (three unless noted), each model alone on one {rep.gpu()}, "
              f"{rep.date}; MFU against the GPU's datasheet bf16 peak. File: `{rep.path}` (commands in "
              "`speed.md` beside it)."]
    return "\n".join(lines) + "\n"


def expert_speed_quack(reports: list[Report]) -> str:
    """Each model alone, the experts on torch's grouped GEMM and on quack's (``--kernels torch,quack``)."""
    (rep,) = reports
    by = _speed_rows(rep)

    def cells(row: dict | None) -> list[str]:
        if row is None:
            return ["–", "–", "–"]
        runs = sum("tokens_per_s" in run for run in row["runs"])
        low, high = row["tokens_per_s_range"]
        return [f"{row['tokens_per_s'] / 1e3:,.0f}k ({low / 1e3:,.0f}–{high / 1e3:,.0f}k, {runs} runs)",
                f"{row['vs_dense']:.2f}x", f"{row['peak_memory_gib']:.1f} GiB"]

    rows = []
    for size, size_label in EXPERT_SIZES.items():
        first = True
        for variant, label in EXPERT_VARIANTS.items():
            grouped, quack = by.get((size, variant, "torch")), by.get((size, variant, "quack"))
            if grouped is None and quack is None:
                continue
            gain = f"{quack['tokens_per_s'] / grouped['tokens_per_s']:.2f}x" if grouped and quack else "–"
            rows.append([size_label if first else "", label, *cells(grouped), *cells(quack), gain])
            first = False
    lines = table(["size", "model", "grouped experts: tokens/s", "vs dense", "peak", "quack experts: tokens/s",
                   "vs dense", "peak", "quack / grouped"], rows)
    lines[1] = "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    lines += ["", f"Medians (range) of interleaved runs, each model alone on one {rep.gpu()}, {rep.date}; torch's "
              "layer kernels, compiled blocks; the dense model has no experts, so both columns compare with its "
              f"one row. File: `{rep.path}` (commands in `speed.md` beside it)."]
    return "\n".join(lines) + "\n"


def expert_gemms(reports: list[Report], impl: str = "quack") -> str:
    """The six expert GEMMs of one training step against the dense twin's (``bench.expert_gemms``),
    on ``impl``'s kernels (``quack`` or ``triton``)."""
    (rep,) = reports
    rows_in = rep.data.get("rows")
    if not isinstance(rows_in, list):
        raise DocsTableError(f"{rep.path}: not an expert GEMM report (no 'rows' list)")
    rows = []
    for r in rows_in:
        if "error" in r:
            rows.append([r["size"], r["variant"], "failed", "", "", "", "", "", ""])
            continue
        if f"{impl}_total_ms" not in r:
            raise DocsTableError(f"{rep.path}: row {r['size']} {r['variant']} has no {impl} timing")
        worst = max(max(r[f"{impl}_error"].values()), max(r[f"{impl}_error_skewed"].values()))
        swiglu = r["dense_swiglu_ms"]
        rows.append([r["size"], f"{r['variant']} ({r['experts']} x top-{r['top_k']})",
                     f"{r['dense_total_ms']:.2f}", f"{r[f'{impl}_total_ms']:.2f}", f"{r[f'{impl}_over_dense']:.2f}x",
                     f"{swiglu['swiglu fwd']:.2f} + {swiglu['swiglu bwd']:.2f}",
                     f"{r[f'{impl}_over_dense_with_swiglu']:.2f}x",
                     f"{r['torch_grouped_step_ms']:.2f} ({r['torch_grouped_over_dense']:.2f}x)", f"{worst:.1e}"])
    lines = table(["size", "experts", "dense six GEMMs, ms", f"{impl} six, ms", f"{impl} / dense",
                   "dense SwiGLU fwd + bwd, ms", f"{impl} / (dense + SwiGLU)", "torch grouped layer, ms",
                   f"{impl} worst error"], rows)
    lines[1] = "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    env = rep.data.get("environment", {})
    versions = (f"quack-kernels {env.get('quack-kernels')}, nvidia-cutlass-dsl {env.get('nvidia-cutlass-dsl')}"
                if impl == "quack" else f"{impl} {env.get(impl)}")
    lines += ["", f"{rep.data['rows'][0]['tokens']:,} tokens "
              f"per step, `do_bench` medians, one {rep.gpu()}, {rep.date}; torch {env.get('torch')}, {versions}. "
              "Worst error: relative to float32, unit-scale inputs, uniform and skewed routing. File: "
              f"`{rep.path}` (command and per-op times in `gemms.md` beside it)."]
    return "\n".join(lines) + "\n"


def loss_match(reports: list[Report]) -> str:
    """The same fit on other expert kernels (``bench.experts match``): loss gaps against the reference."""
    (rep,) = reports
    d = rep.data
    if not isinstance(d.get("deviations"), dict):
        raise DocsTableError(f"{rep.path}: not a loss-curve match (no 'deviations')")
    rows = []
    for name, c in d["contenders"].items():
        final = f"{c['loss'][-1]:.4f}" if c.get("loss") else "–"
        gap = d["deviations"].get(name)
        if gap is None:
            rows.append([f"`{name}` (reference)", final, "–", "–", "–", "–"])
            continue
        verdict = {True: "yes", False: "**no**"}.get(gap.get("within_noise"), "the yardstick")
        rows.append([f"`{name}`", final, f"{gap['mean_abs']:.4f}", f"{gap['max_abs']:.4f}",
                     f"{gap['last_tenth_mean_abs']:.4f}", verdict])
    lines = table(["kernels", "final training loss", "mean gap", "largest gap", "mean gap, last tenth",
                   "within bf16 noise"], rows)
    lines[1] = "| --- | ---: | ---: | ---: | ---: | --- |"
    lines += ["", f"{d['steps']:,} steps of the {d['size']} {d['variant']} model, same seed and data order, the "
              f"three fits side by side on one {rep.gpu()}, {rep.date}; gaps in training loss (nats) against "
              f"`{d['reference']}` at every logged step. Within noise: mean gap, overall and over the last tenth, "
              f"at most {d['noise_factor']}x that of `{d['noise']}` (the same kernels with compile off). File: "
              f"`{rep.path}` (command in `match.md` beside it)."]
    return "\n".join(lines) + "\n"


RUNS = "results/quality/run-summaries/"
MARKOV_ECOLI = "results/quality/markov_ecoli536.json"


def run_summaries(reports: list[Report], labels: tuple[str, ...], markov: bool = False,
                  ensemble: tuple[str, str, str] | None = None, last_label: str = "held-out bits/base",
                  file_column: bool = True) -> str:
    """Training runs from their ``results/quality/run-summaries`` files: steps, wall clock, the last
    and the best held-out bits/base. ``markov``: the first report is the Markov table, whose best
    order leads; ``ensemble``: (label, group, subset) of ``results/quality/ensembles.json``, the last
    report, as a closing row."""
    reports = list(reports)
    rows = []
    if markov:
        table_ = reports.pop(0)
        best = min(table_.data["rows"], key=lambda r: r["bits_per_base"])
        top = max(r["order"] for r in table_.data["rows"])
        rows.append([f"order-{best['order']} Markov", "—", f"{table_.data['seconds']:.0f} s (CPU, orders 0–{top})",
                     f"{best['bits_per_base']:.4f}", "—"] + ([f"`{Path(table_.path).name}`"] if file_column else []))
    closing = reports.pop() if ensemble else None
    if len(labels) != len(reports):
        raise DocsTableError(f"{len(labels)} labels for {len(reports)} run summaries")
    for label, rep in zip(labels, reports):
        d = rep.data
        try:
            last, best = d["last"]["val/bits_per_base"], d["best"]
            cells = [label, f"{d['steps']:,}", f"{d['wall_clock_s']:,} s", f"{last:.4f}",
                     f"{best['val/bits_per_base']:.4f} ({best['step']:,})"]
        except (KeyError, TypeError) as err:
            raise DocsTableError(f"{rep.path}: not a run summary (no {err})") from None
        rows.append(cells + ([f"`{Path(rep.path).name}`"] if file_column else []))
    if closing is not None:
        label, group, subset = ensemble
        value = closing.data[group]["ensemble_bits_per_base"][subset]
        rows.append([label, "—", "—", f"{value:.4f}", "—"] + (["`ensembles.json`"] if file_column else []))
    header = ["run", "steps", "wall-clock", last_label, "best (step)"] + (["summary"] if file_column else [])
    lines = table(header, rows)
    lines[1] = "| --- | ---: | ---: | ---: | ---: |" + (" --- |" if file_column else "")
    def distinct(key: str) -> str:
        return "; ".join(dict.fromkeys(str(rep.data.get(key)) for rep in reports))

    files = ([table_.path] if markov else []) + [rep.path for rep in reports] + ([closing.path] if closing else [])
    lines += ["", f"{distinct('hardware')}; {distinct('date')}; {distinct('software')}. Files (each run's "
              "with its command and validation curve): " + ", ".join(f"`{f}`" for f in files) + "."]
    return "\n".join(lines) + "\n"


USE_JOBS = {"score-fasta": "score-fasta", "embed": "embed", "score-variants": "score-variants, {work:,} SNVs",
            "generate-64": "generate, 64 x {length:,}"}


def use_commands(reports: list[Report]) -> str:
    """The use commands as fresh processes: biomoe on torch's and on TE's layer kernels against HF."""
    import statistics

    records = [(rep, r) for rep in reports for r in rep.data.get("records", [])]
    if not records:
        raise DocsTableError(f"{reports[0].path}: not an inference report (no 'records' list)")
    by = {(r["task"], r["contender"]): r for _, r in records if r.get("status") == "ok"}

    def cold_warm(r: dict | None) -> str:
        if r is None:
            return "—"
        warm = statistics.median(run["seconds"] for run in r["runs"])
        steps = f" ({r['steps_per_s']:,.0f} steps/s)" if r.get("steps_per_s") else ""
        return f"{r['cold_seconds']:.1f} s / {warm:.1f} s{steps}"

    def steady(r: dict | None) -> str:
        if r is None or not r.get("steady_rate") or r["task"].startswith("generate"):
            return "—"
        return f"{r['steady_rate'] / 1e6:.2f}" if r["unit"] == "bases/s" else f"{r['steady_rate']:,.0f}"

    rows = []
    for task, label in USE_JOBS.items():
        torch_row, te_row, hf = (by.get((task, c)) for c in ("biomoe-torch", "biomoe-te", "hf"))
        if torch_row is None:
            continue
        length = torch_row["work"] // 64 if task == "generate-64" else 0
        unit = " Mbp/s" if torch_row["unit"] == "bases/s" and not task.startswith("generate") else (
            " SNVs/s" if task == "score-variants" else "")
        rows.append([label.format(work=torch_row["work"], length=length), cold_warm(torch_row), cold_warm(te_row),
                     cold_warm(hf), f"{steady(torch_row)} / {steady(te_row)}{unit}" if unit else "—",
                     ratio(torch_row.get("ratio_vs_hf"))])
    lines = table(["job", "torch kernels: cold / warm", "TE kernels: cold / warm", "HF: cold / warm",
                   "steady rate, torch / TE", "torch vs HF (warm)"], rows)
    env = reports[0].data.get("environment", {})
    lines += ["", f"Each run a fresh process, cold run first, then warm runs interleaved (medians); one "
              f"{reports[0].gpu()}, {reports[0].date}; torch {env.get('torch')}, Transformer Engine "
              f"{env.get('transformer_engine')}, transformers {env.get('transformers')}. Ratios on the wall "
              "basis, generation's on the sampling alone. Files: " + ", ".join(f"`{rep.path}`" for rep in reports)
              + "."]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Table:
    sources: tuple[str, ...]
    render: Callable[[list[Report]], str]


TABLES: dict[str, Table] = {
    "bench-sweep": Table(("results/bench/sweep/small-shapes.json", "results/bench/sweep/mixtral.json"),
                         sweep_headline),
    "bench-sweep-columns": Table(("results/bench/sweep/small-shapes.json", "results/bench/sweep/mixtral.json"),
                                 sweep_columns),
    "bench-single-run": Table(("results/bench/bench.json",), single_run),
    "bench-single-run-memory": Table(("results/bench/bench.json",), single_run_memory),
    "bench-single-run-step-time": Table(("results/bench/bench.json",), single_run_step_time),
    "bare-loop-mixtral": Table(("results/bench/bare-loop/bench.json",),
                               functools.partial(bare_loop_variants, shape="mixtral-2layer")),
    "bare-loop-dna-small": Table(("results/bench/bare-loop/bench.json",),
                                 functools.partial(bare_loop_variants, shape="dna-small")),
    "bare-loop-compile": Table(("results/bench/compile/bench.json",),
                               functools.partial(bare_loop_variants, shape="mixtral-2layer")),
    "bare-loop-longest-sequence": Table(("results/bench/bare-loop/bench.json",), longest_sequence),
    "quality-moe-vs-dense": Table(
        (MARKOV_ECOLI,) + tuple(f"{RUNS}{n}.json" for n in (
            "ecoli-quality", "ecoli-quality-dense", "ecoli-long", "ecoli-long-dense", "ecoli-quality-timebudget300s",
            "ecoli-quality-timebudget300s-dense")),
        functools.partial(run_summaries, markov=True, labels=(
            "MoE, `ecoli-quality` (dropout 0.1)", "dense control, same tokens", "MoE, `ecoli-long` (dropout 0.2)",
            "dense control, same tokens", "MoE, 300 s TimeBudget", "dense control, same tokens"))),
    "quality-regularisation": Table(
        tuple(f"{RUNS}{n}.json" for n in ("ecoli-v1-wd1", "ecoli-v2-wd1-ema", "ecoli-v3-wide768", "ecoli-v4-wd2-long"))
        + ("results/quality/ensembles.json",),
        functools.partial(run_summaries, last_label="last", file_column=False, labels=(
            "v1: weight decay 1.0 (dropout 0.1)",
            "v2: v1 + EMA of the weights (Lightning `EMAWeightAveraging`, decay 0.997)",
            "v3: hidden 768 / 12 heads / ffn 1536, dropout 0.3, weight decay 1.0, EMA 0.996",
            "v4: dropout 0.2, weight decay 2.0, EMA 0.998"),
            ensemble=("mean of the four models' probabilities (four trainings, not one config)",
                      "regularisation_variants", "v1+v2+v3+v4"))),
    "quality-mutation": Table(
        tuple(f"{RUNS}{n}.json" for n in ("ecoli-v2-wd1-ema", "ecoli-v10-wd1-ema-mut5", "ecoli-v11-wd1-ema-mut10-long",
                                          "ecoli-v3-wide768", "ecoli-v9-wide768-mut5", "ecoli-v12-wide768-mut10")),
        functools.partial(run_summaries, last_label="last", file_column=False, labels=(
            "v2 (no mutation): hidden 512, wd 1.0, EMA", "v10: v2 + 5 % mutation (still falling at the end)",
            "**v11: v2 + 10 % mutation, 3,600 steps** (the recipe of `configs/ecoli-mutation.yaml`)",
            "v3 (no mutation): hidden 768, dropout 0.3, wd 1.0, EMA", "v9: v3 + 5 % mutation, 2,600 steps",
            "v12: v3 + 10 % mutation, 2,300 steps (still falling slowly at the end)"))),
    "bench-recipes": Table(("results/bench/recipes-all-shapes/bench.json",), recipes),
    "expert-speed": Table(("results/experts/speed/speed.json",), expert_speed),
    "expert-speed-quack": Table(("results/experts/speed-quack/speed.json",), expert_speed_quack),
    "expert-gemms": Table(("results/experts/gemms/gemms.json",), expert_gemms),
    "expert-loss-match": Table(("results/experts/quack-loss-match/match.json",), loss_match),
    "expert-gemms-triton": Table(("results/experts/gemms-triton/gemms.json",),
                                 functools.partial(expert_gemms, impl="triton")),
    "use-commands": Table(("results/bench/inference-gpu/score-embed.json",
                           "results/bench/inference-gpu/variants-generate.json"), use_commands),
}


def render(name: str, root: Path = ROOT) -> str:
    if name not in TABLES:
        raise DocsTableError(f"table:{name}: no such table (known: {', '.join(TABLES)})")
    spec = TABLES[name]
    return spec.render([read_report(path, root) for path in spec.sources])


def documents(root: Path = ROOT) -> list[Path]:
    return sorted(p for pattern in DOCUMENTS for p in root.glob(pattern))


def rendered_text(text: str, where: str, root: Path = ROOT) -> str:
    """``text`` with the body of every marked table replaced by its rendering."""
    def replace(match: re.Match[str]) -> str:
        try:
            body = render(match["name"], root)
        except DocsTableError as err:
            raise DocsTableError(f"{where}: {err}") from None
        return match.group(1) + body + match.group(4)

    if len(OPENING.findall(text)) != len(MARKER.findall(text)):
        raise DocsTableError(f"{where}: a '<!-- table:NAME -->' marker without its '<!-- /table -->'")
    return MARKER.sub(replace, text)


def stale_tables(root: Path = ROOT) -> list[str]:
    """``document: table:NAME`` for every marked table whose text is not what its files render."""
    stale = []
    for doc in documents(root):
        text = doc.read_text()
        where = str(doc.relative_to(root))
        new = rendered_text(text, where, root)
        if new != text:
            old_bodies = {m["name"]: m["body"] for m in MARKER.finditer(text)}
            new_bodies = {m["name"]: m["body"] for m in MARKER.finditer(new)}
            stale += [f"{where}: table:{n}" for n in old_bodies if old_bodies[n] != new_bodies[n]]
    return stale


def marked_tables(root: Path = ROOT) -> dict[str, list[str]]:
    """Each table name to the documents that show it."""
    found: dict[str, list[str]] = {}
    for doc in documents(root):
        for m in MARKER.finditer(doc.read_text()):
            found.setdefault(m["name"], []).append(str(doc.relative_to(root)))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.docs_tables", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is stale")
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = [f"stale: {line} (run `make docs-tables`)" for line in stale_tables(ROOT)]
            stale += headline_problems(ROOT)
            for line in stale:
                print(line, file=sys.stderr)
            return 1 if stale else 0
        from biomoe.files import write_text

        for doc in documents(ROOT):
            text = doc.read_text()
            where = str(doc.relative_to(ROOT))
            new = rendered_text(text, where, ROOT)
            if new != text:
                write_text(doc, new)
                print(f"rendered {where}")
    except (DocsTableError, HeadlineSourceError) as err:
        print(f"docs-tables: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
