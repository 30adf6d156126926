"""The training-speed tables: the bench sweeps, the single-run sweep, the bare loop and the recipes."""

from __future__ import annotations

import functools
from typing import Callable

from bench.docs_tables.cells import against, best_fp8, cases, hf_configurations_run, kilo, pick, shape_label, table
from bench.docs_tables.report import DocsTableError, Report, Table
from bench.records import BenchRecord, fastest_hf


def _sweep_table(reports: list[Report], header: list[str],
                 cells: Callable[[list[BenchRecord], str, BenchRecord | None], list[str]], lead: str) -> str:
    """A sweep's table: per shape, its fastest HF row and ``cells(records, case, base)``; the footer
    gives the run count, the machine, the HF configurations run and the files."""
    shapes_of = [(rep.path, cases(rep.records)) for rep in reports]
    records = [r for rep in reports for r in rep.records]
    for case in cases(records):  # a ratio is taken inside one run, never across two files
        holders = [path for path, shapes in shapes_of if case in shapes]
        if len(holders) > 1:
            raise DocsTableError(f"{holders[1]}: shape {case} is also in {holders[0]}; a sweep reads each shape "
                                 "from one file")
    rows = []
    for case in cases(records):
        base = fastest_hf([r for r in records if r.case == case]).get(case)
        first = next(r for r in records if r.case == case)
        rows.append([shape_label(first), f"{kilo(base.tokens_per_s)} (`{base.contender}`)" if base else "—"]
                    + cells(records, case, base))
    repeats = {rep.data["settings"].get("repeats") for rep in reports}
    lines = table(["shape", "fastest HF row of the run"] + header, rows)
    lines += ["", f"{lead.format(runs=', '.join(str(n) for n in sorted(repeats)))}; {_provenance(reports)}"]
    return "\n".join(lines) + "\n"


def _provenance(reports: list[Report]) -> str:
    """Machine, HF configurations and files: said once when every file shares machine, date and
    software, else file by file (a sweep may be assembled from runs of one shape each)."""
    if len({rep.machine() for rep in reports}) == 1:
        return (f"{reports[0].machine()}. {hf_configurations_run([r for rep in reports for r in rep.records])}. "
                "Files: " + ", ".join(f"`{rep.path}`" for rep in reports) + ".")
    return " ".join(f"`{rep.path}` ({', '.join(cases(rep.records))}): {rep.machine()}; "
                    f"{hf_configurations_run(rep.records)}." for rep in reports)


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
    "bench-recipes": Table(("results/bench/recipes-all-shapes/bench.json",), recipes),
}
