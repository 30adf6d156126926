"""The optimizer tables: master-weight storage, the compiled AdamW in ``cli.py fit`` and alone, and
the bare loop's profile, read from their reports (:mod:`bench.docs_tables.bench_files`)."""

from __future__ import annotations

import functools
import re
from typing import Any

from bench.docs_tables.bench_files import (COMPILED_4K, COMPILED_16K, M4, M16, OPTIMIZER_STEP, STORAGE, SWEEP_MIXTRAL,
                                           machines as _machines, measured as _row, percent as _pct,
                                           run_counts as _run_counts, run_spread as _within, short as _short,
                                           software as _software, times as _x)
from bench.docs_tables.cells import cases, kilo, pick, table
from bench.docs_tables.report import DocsTableError, Report, Table
from bench.records import BenchRecord


STORAGE_ROWS = (  # (file, contender, label)
    (SWEEP_MIXTRAL, "hf-bf16-fused", "HF: bf16 weights, bf16 moments (the run's baseline)"),
    (SWEEP_MIXTRAL, "biomoe-cli-repeated", "full fp32 master + fp32 moments (default)"),
    (STORAGE, "hf-bf16-fused", "HF: bf16 weights, bf16 moments (the run's baseline)"),
    (STORAGE, "biomoe-cli-repeated", "`master_storage: remainder`"),
    (STORAGE, "biomoe-cli-bf16first", "remainder + `moment_dtype: bf16-first`"),
)
STORAGE_EP_ROW = (STORAGE, "biomoe-cli-ep", "remainder, under `ExpertParallelStrategy` (ep=1)")


def master_storage(reports: list[Report], with_strategy: bool = False) -> str:
    """``cli.py fit`` with each way of storing the optimizer state, two shapes, each file's rows
    against that file's own HF row; ``with_strategy`` adds the fit under ExpertParallelStrategy."""
    by_path = {rep.path: rep for rep in reports}
    specs = STORAGE_ROWS + ((STORAGE_EP_ROW,) if with_strategy else ())
    rows, used = [], []
    for path, contender, label in specs:
        rep = by_path[path]
        cells = [label]
        for case in (M16, M4):
            r, hf = _row(rep, case, contender), _row(rep, case, "hf-bf16-fused")
            used.append((rep, r))
            if contender == "hf-bf16-fused":
                cells += [kilo(r.tokens_per_s), f"{r.peak_mem_gb:.1f}"]
                continue
            rate = f"{kilo(r.tokens_per_s)} ({_x(r, hf)}"
            if contender == "biomoe-cli-ep":
                rate += f"; {_pct(r.tokens_per_s, _row(rep, case, 'biomoe-cli-repeated').tokens_per_s, 1)} of the fit"
                rate += " without it"
            cells += [rate + ")", f"{r.peak_mem_gb:.1f} ({r.peak_mem_gb / hf.peak_mem_gb:.2f}×)"]
        rows.append(cells + [_short(path)])
    header = ["optimizer state per parameter", "16,384 tokens", "peak GB", "4,096 tokens", "peak GB", "file"]
    lines = table(header, rows)
    lines[1] = lines[1].removesuffix(" ---: |") + " --- |"
    runs = "; ".join(f"{_short(rep.path)}: {_run_counts(rep, [r for p, r in used if p is rep])}" for rep in reports)
    lines += ["", f"Tokens/s: medians of interleaved runs per row ({runs}; every run in the `.md` beside each "
              "file). Ratios are against the HF row of the same file: the two files are separate runs, so no ratio "
              "crosses them. Peak GB: the highest of the row's runs. The files name each row's contender "
              "(`biomoe-cli-repeated` in both), not its master storage: that is the default of the code each "
              "ran, full fp32 masters in the sweep and remainders in the storage run "
              "(`results/bench/optimizer-storage/README.md`). " + _machines(reports) + "; "
              + ", ".join(f"{_short(rep.path)} {rep.date}" for rep in reports) + ". Files: "
              + ", ".join(f"`{rep.path}`" for rep in reports) + "."]
    return "\n".join(lines) + "\n"


COMPILED_ROWS = (
    ("hf-bf16-fused", "HF `MixtralForCausalLM`, bf16, grouped_mm, fused AdamW (baseline)"),
    ("biomoe-cli-repeated", "TE `FusedAdam`, full fp32 masters (`auto`, the default)"),
    ("biomoe-cli-compiled-adamw", "`backend: compiled`"),
    ("biomoe-cli-compiled-remainder", "`backend: compiled`, `master_storage: remainder`"),
    ("biomoe-cli-compiled-all", "`backend: compiled` and `model.runtime.compile: true`"),
)


def _compiled_footer(reports: list[Report]) -> str:
    parts = []
    for rep in reports:
        records = [r for r in rep.records if r.status == "ok" and r.tokens_per_s]
        parts.append(f"{_run_counts(rep, records)} per row at {records[0].tokens_per_step:,} tokens, every run within "
                     f"{_within(records):.1f} % of its row's median (`{rep.path}`, {rep.date})")
    return ("Tokens/s: medians of interleaved runs, " + "; ".join(parts) + ". Each ratio is against the HF row of "
            "the same file; peak GB is the highest of the row's runs. " + _machines(reports) + ".")


def compiled_fit(reports: list[Report]) -> str:
    """``cli.py fit`` with TE's fused AdamW and with the compiled one, one file per shape."""
    rows = []
    for contender, label in COMPILED_ROWS:
        cells = [label]
        for rep in reports:
            case = cases(rep.records)[0]
            r, hf = pick(rep.records, case, contender), _row(rep, case, "hf-bf16-fused")
            cells += ["—"] * 3 if r is None else [kilo(r.tokens_per_s), _x(r, hf), f"{r.peak_mem_gb:.1f}"]
        rows.append(cells)
    shapes = [f"{_row(rep, cases(rep.records)[0], 'hf-bf16-fused').tokens_per_step:,} tokens" for rep in reports]
    lines = table(["`cli.py fit`"] + [c for s in shapes for c in (s, "vs HF", "peak GB")], rows)
    return "\n".join(lines + ["", _compiled_footer(reports)]) + "\n"


def compiled_fit_detail(reports: list[Report]) -> str:
    """The same rows with the step time and the kernels per step, a row per shape and contender."""
    rows = []
    for rep in reports:
        case = cases(rep.records)[0]
        hf = _row(rep, case, "hf-bf16-fused")
        for contender, label in COMPILED_ROWS:
            r = pick(rep.records, case, contender)
            if r is None:
                continue
            peak = f"{r.peak_mem_gb:.1f}"
            if contender != "hf-bf16-fused":
                peak += f" ({r.peak_mem_gb / hf.peak_mem_gb:.2f}×)"
            rows.append([f"{r.tokens_per_step:,}", label, f"{r.tokens_per_s:,.0f}", _x(r, hf), f"{r.step_ms:.1f}", peak,
                         f"{r.kernels_per_step:,}" if r.kernels_per_step else "—"])
    lines = table(["tokens per step", "row", "tokens/s", "vs HF", "step ms", "peak GB (vs HF)", "kernels per step"],
                  rows)
    lines[1] = "| ---: | --- | ---: | ---: | ---: | ---: | ---: |"
    return "\n".join(lines + ["", _compiled_footer(reports) + " Step ms: the median run's median step; kernels: "
                              "GPU kernels of one untimed step (torch.profiler)."]) + "\n"


def optimizer_step(reports: list[Report]) -> str:
    """``python -m bench.optimizer_step``: each optimizer's step alone, the latest run beside the earlier."""
    (rep,) = reports
    try:
        latest, *earlier = rep.data["runs"]
        tables = [{row["optimizer"]: row for row in run["rows"]} for run in rep.data["runs"]]
        names = list(dict.fromkeys(name for t in tables for name in t))
        width = {name: next(t[name]["bytes_per_param"] for t in tables if name in t) for name in names}

        def cells(t: dict[str, dict[str, Any]], name: str) -> list[str]:
            if name not in t:
                return ["—", "—"]
            row = t[name]
            return [f"{row['ms']:.2f} ({row['ms_min']:.2f}–{row['ms_max']:.2f})", f"{row['tb_per_s']:.2f}"]

        rows = [[name, str(width[name])] + [c for t in tables for c in cells(t, name)] for name in names]
        about = "; ".join(run["about"] for run in earlier if run.get("about"))
        info = (f"Timing: {rep.data['timing']}. One {rep.data['device']}, {rep.date}; torch {rep.data['torch']}, "
                f"Transformer Engine {rep.data['transformer_engine']}; {rep.data['parameters']:,} parameters in "
                f"{rep.data['tensors']} tensors ({rep.data['shape']})")
    except (KeyError, TypeError, ValueError) as err:
        raise DocsTableError(f"{rep.path}: not an optimizer-step report (no {err})") from None
    header = ["optimizer", "bytes/parameter", "ms (min–max)", "TB/s"]
    names_of = ["earlier run"] if len(earlier) == 1 else [f"earlier run {i + 1}" for i in range(len(earlier))]
    header += [c for name in names_of for c in (f"{name}: ms", "TB/s")]
    lines = table(header, rows)
    footer = info + (f". Of the earlier run the file says: {about}" if about else "") + f". File: `{rep.path}`."
    return "\n".join(lines + ["", footer]) + "\n"


PROFILE_ROWS = (  # (label, the op in torch.profiler's table whose Self CUDA time is the row's)
    ("expert grouped GEMMs (`aten::_grouped_mm`, forward and backward)", "aten::_grouped_mm"),
    ("AdamW (`aten::_fused_adamw_`: fused, bf16 weights)", "aten::_fused_adamw_"),
    ("dense GEMMs (`aten::mm`: attention projections, router, LM head)", "aten::mm"),
    ("elementwise products (`aten::mul`: SwiGLU, routing weights) and their gradients", "aten::mul"),
    ("attention backward (`FusedAttnFuncBackward`, cuDNN flash)", "FusedAttnFuncBackward"),
)
UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([0-9.]+)(us|ms|s)", text.strip())
    if match is None:
        raise ValueError(f"not a time: {text!r}")
    return float(match[1]) * UNITS[match[2]]


def parse_profile(text: str) -> tuple[int, float, dict[str, float]]:
    """torch.profiler's key-averages table: (steps, Self CUDA total ms, Self CUDA ms of each op's
    first row). Columns are found by their header, so a table with other columns still reads."""
    steps = re.search(r"\((\d+) steps\)", text)
    total = re.search(r"Self CUDA time total:\s*(\S+)", text)
    header = next((line for line in text.splitlines() if line.strip().startswith("Name")), None)
    if not (steps and total and header):
        raise ValueError("no torch.profiler table with its step count and Self CUDA total")
    column = re.split(r"\s{2,}", header.strip()).index("Self CUDA")
    ops: dict[str, float] = {}
    for line in text.splitlines():
        cols = re.split(r"\s{2,}", line.strip())
        if len(cols) > column and re.fullmatch(r"[0-9.]+(us|ms|s)", cols[column]):
            ops.setdefault(cols[0], _ms(cols[column]))
    return int(steps[1]), _ms(total[1]), ops


def _config(record: BenchRecord, key: str) -> int:
    match = re.search(rf"--model\.config\.{key}=(\d+)", record.details.get("command", ""))
    if match is None:
        raise KeyError(f"--model.config.{key} in {record.id}'s command")
    return int(match[1])


def _expert_gemm_tflop(rep: Report, case: str) -> float:
    """The expert GEMMs' TFLOP per step at the profiled shape, 2·rows·in·out per GEMM (gate, up and
    down projections), forward and twice backward, from the shape a ``cli.py fit`` row of the file ran."""
    cli = next((r for r in rep.records if r.case == case and r.contender.startswith("biomoe-cli")), None)
    if cli is None:
        raise KeyError(f"a biomoe-cli row of {case}")
    rows = cli.tokens_per_step * _config(cli, "top_k")
    per_layer = 2 * rows * 3 * _config(cli, "hidden_size") * _config(cli, "ffn_hidden_size")
    return 3 * per_layer * _config(cli, "num_layers") / 1e12


def loop_profile(reports: list[Report], contender: str = "biomoe-loop") -> str:
    """Where the bare loop's GPU time goes, from the torch.profiler table the bench keeps with its
    report (``--profile``, on the first shape), with the expert GEMMs' rate against the dense peak."""
    (rep,) = reports
    try:
        steps, total, ops = parse_profile(rep.data["profiles"][contender])
        case = cases(rep.records)[0]
        picked = [(label, ops[op] / steps) for label, op in PROFILE_ROWS]
        gemm_tflop = _expert_gemm_tflop(rep, case)
        peak = float(rep.data["peak_tflops_for_mfu"])
    except (KeyError, ValueError) as err:
        raise DocsTableError(f"{rep.path}: no {contender} profile to read ({err})") from None
    per_step = total / steps
    rest = per_step - sum(ms for _, ms in picked)
    rows = [[label, f"{ms:.1f}", _pct(ms, per_step)] for label, ms in picked]
    rows.append(["everything else (attention forward, permutation, norms, other elementwise)", f"{rest:.1f}",
                 _pct(rest, per_step)])
    lines = table(["work", "GPU ms per step", "share"], rows)
    rate = gemm_tflop / picked[0][1] * 1e3
    first = next(r for r in rep.records if r.case == case)
    lines += ["", f"`{contender}` at {first.shape}, {first.tokens_per_step:,} tokens, bf16: torch.profiler over "
              f"{steps} steps, each op's Self CUDA time over {steps}, shares of the profile's Self CUDA total "
              f"({per_step:.1f} ms per step). At that time the expert GEMMs run at {rate:.0f} TFLOP/s: "
              f"{gemm_tflop:.1f} TFLOP per step (2·rows·in·out per GEMM, forward and twice backward, for the shape "
              f"of the file's `cli.py fit` commands), {_pct(rate, peak)} of the {peak:.0f} TFLOP/s dense bf16 rate "
              f"the file takes for MFU. {_software(rep)}, {rep.date}. File: `{rep.path}` (`profiles`)."]
    return "\n".join(lines) + "\n"


TABLES: dict[str, Table] = {
    "optimizer-master-storage": Table((SWEEP_MIXTRAL, STORAGE), master_storage),
    "optimizer-master-storage-strategy": Table((SWEEP_MIXTRAL, STORAGE),
                                               functools.partial(master_storage, with_strategy=True)),
    "optimizer-compiled-fit": Table((COMPILED_16K, COMPILED_4K), compiled_fit),
    "optimizer-compiled-fit-detail": Table((COMPILED_16K, COMPILED_4K), compiled_fit_detail),
    "optimizer-step": Table((OPTIMIZER_STEP,), optimizer_step),
    "optimizer-loop-profile": Table((STORAGE,), loop_profile),
}
"""Each table's name (its marker in the documents), files and renderer."""
