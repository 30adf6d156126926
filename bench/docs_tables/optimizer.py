"""The optimizer tables: master-weight storage, the compiled AdamW in ``cli.py fit`` and alone, the
bare loop's profile, and the goals of the training benchmark, read from their reports.

Every ratio is taken inside one file, whose rows ran interleaved in one run: two files are two runs
on different days, so a ratio across them would mix run-to-run drift into the comparison."""

from __future__ import annotations

import functools
import re
from typing import Any, Callable

from bench.docs_tables.cells import best_fp8, cases, kilo, pick, table
from bench.docs_tables.report import DocsTableError, Report, Table
from bench.records import BenchRecord

SINGLE_RUN = "results/bench/bench.json"
SWEEP_SMALL = "results/bench/sweep/small-shapes.json"
SWEEP_MIXTRAL = "results/bench/sweep/mixtral.json"
RECIPES = "results/bench/recipes-all-shapes/bench.json"
STORAGE = "results/bench/optimizer-storage/bench.json"
COMPILED_16K = "results/bench/compiled-adamw/mixtral-16k.json"
COMPILED_4K = "results/bench/compiled-adamw/mixtral-4k.json"
OPTIMIZER_STEP = "results/bench/compiled-adamw/optimizer-step.json"
STRATEGY_ONE_GPU = "results/scaling/mixtral-1gpu-strategy-overhead/without-fsdp-at-one-gpu/scaling.json"
M16, M4, DNA = "mixtral-2layer@16384", "mixtral-2layer@4096", "dna-small@16384"


def _row(rep: Report, case: str, contender: str, precision: str = "bf16") -> BenchRecord:
    """The measured row, or a one-line error naming the file: a table must not lose a row silently."""
    record = pick(rep.records, case, contender, precision)
    if record is None or not record.tokens_per_s:
        raise DocsTableError(f"{rep.path}: no measured {case}/{contender}/{precision} row")
    return record


def _fp8(rep: Report, case: str, contender: str) -> BenchRecord:
    record = best_fp8(rep.records, case, contender)
    if record is None:
        raise DocsTableError(f"{rep.path}: no measured FP8 row of {case}/{contender}")
    return record


def _x(a: BenchRecord, b: BenchRecord) -> str:
    return f"{a.tokens_per_s / b.tokens_per_s:.2f}×"


def _pct(a: float, b: float, digits: int = 0) -> str:
    return f"{100 * a / b:.{digits}f} %"


def _short(path: str) -> str:
    return f"`{path.removeprefix('results/bench/')}`"


def _software(rep: Report) -> str:
    env = rep.data.get("environment", {})
    return (f"One {rep.gpu()}; torch {env.get('torch')}, Transformer Engine {env.get('transformer_engine')}, "
            f"transformers {env.get('transformers')}")


def _machines(reports: list[Report]) -> str:
    """The machine and software once if every file records the same, else file by file."""
    distinct = list(dict.fromkeys(_software(rep) for rep in reports))
    if len(distinct) == 1:
        return distinct[0]
    return "; ".join(f"{_short(rep.path)}: {_software(rep)}" for rep in reports)


def _run_counts(rep: Report, records: list[BenchRecord]) -> str:
    """``3 runs`` or ``2 runs (of 3 asked)``, read from the rows' own runs, not the command."""
    counts = sorted({len(r.runs) or 1 for r in records})
    text = "–".join(str(n) for n in counts) + (" run" if counts == [1] else " runs")
    asked = rep.data.get("settings", {}).get("repeats")
    return text + (f" (of {asked} asked)" if asked and max(counts) < asked else "")


def _within(records: list[BenchRecord]) -> float:
    """The largest distance of one run's rate from its row's median, in percent."""
    return max((100 * abs(run / r.tokens_per_s - 1) for r in records for run in r.runs), default=0.0)


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


def _scaling_rate(rep: Report, layout: str) -> dict[str, Any]:
    for r in rep.data.get("results", []):
        if r.get("layout") == layout and r.get("tokens_per_s"):
            return r
    raise DocsTableError(f"{rep.path}: no {layout} result")


Goal = Callable[[dict[str, Report]], str]


def _goal_bf16_16k(f: dict[str, Report]) -> str:
    s, c = f[SINGLE_RUN], f[COMPILED_16K]
    hf, fit = _row(s, M16, "hf-bf16-fused"), _row(s, M16, "biomoe-cli")
    chf = _row(c, M16, "hf-bf16-fused")
    return (f"single run: {_x(fit, hf)} ({_x(_row(s, M16, 'biomoe-cli-compile'), hf)} with `model.runtime.compile`), "
            f"bare loop {_x(_row(s, M16, 'biomoe-loop'), hf)}, the fit {_x(fit, _row(s, M16, 'hf-eager'))} against "
            f"HF's eager experts; compiled-AdamW run: {_x(_row(c, M16, 'biomoe-cli-compiled-adamw'), chf)} with "
            f"`backend: compiled`, {_x(_row(c, M16, 'biomoe-cli-compiled-all'), chf)} with `model.runtime.compile` too")


def _goal_fp8_16k(f: dict[str, Report]) -> str:
    s = f[SINGLE_RUN]
    hf, fit, loop = _row(s, M16, "hf-bf16-fused"), _fp8(s, M16, "biomoe-cli"), _fp8(s, M16, "biomoe-loop")
    return f"single run: {_x(fit, hf)} ({fit.precision}); bare loop {_x(loop, hf)} ({loop.precision})"


def _goal_4k(f: dict[str, Report]) -> str:
    s, c = f[SINGLE_RUN], f[COMPILED_4K]
    hf, chf = _row(s, M4, "hf-bf16-fused"), _row(c, M4, "hf-bf16-fused")
    return (f"single run: {_x(_row(s, M4, 'biomoe-cli'), hf)} ({_x(_row(s, M4, 'biomoe-cli-compile'), hf)} with "
            f"`model.runtime.compile`); compiled-AdamW run: {_x(_row(c, M4, 'biomoe-cli-compiled-adamw'), chf)} "
            f"with `backend: compiled`, {_x(_row(c, M4, 'biomoe-cli-compiled-remainder'), chf)} with remainder masters")


def _goal_dna(f: dict[str, Report], goal: float = 1.30) -> str:
    single = _x(_row(f[SINGLE_RUN], DNA, "biomoe-cli"), _row(f[SINGLE_RUN], DNA, "hf-bf16-fused"))
    medians = {name: _row(f[path], DNA, "biomoe-cli").tokens_per_s / _row(f[path], DNA, "hf-bf16-fused").tokens_per_s
               for name, path in (("sweep", SWEEP_SMALL), ("recipes run", RECIPES))}
    verdict = "not met in the medians" if min(medians.values()) < goal else "met in the medians"
    return (f"single run: {single}; " + ", ".join(f"{name}: {v:.2f}×" for name, v in medians.items())
            + f" (medians): {verdict}")


def _goal_fit_vs_loop(f: dict[str, Report]) -> str:
    s, sweep = f[SINGLE_RUN], f[SWEEP_SMALL]

    def share(rep: Report, case: str) -> str:
        return _pct(_row(rep, case, "biomoe-cli").tokens_per_s, _row(rep, case, "biomoe-loop").tokens_per_s)

    fp8 = _fp8(s, M16, "biomoe-cli")
    loop8 = _row(s, M16, "biomoe-loop", fp8.precision)
    return (f"single run: {share(s, DNA)} (dna-small), {share(s, M16)} (mixtral 16,384), {share(s, M4)} (mixtral "
            f"4,096), FP8 {_pct(fp8.tokens_per_s, loop8.tokens_per_s)} (16,384, {fp8.precision}); sweep: "
            f"{share(sweep, DNA)} (dna-small)")


def _goal_masters(f: dict[str, Report]) -> str:
    s = f[SINGLE_RUN]

    def lost(case: str) -> str:
        fit, bare = _row(s, case, "biomoe-cli"), _row(s, case, "biomoe-cli-nomaster")
        return f"{100 * (1 - fit.tokens_per_s / bare.tokens_per_s):.0f} %"

    return (f"single run, tokens/s lost against `-nomaster`: {lost(M16)} (mixtral 16,384), {lost(DNA)} (dna-small), "
            f"{lost(M4)} (mixtral 4,096)")


def _goal_strategy(f: dict[str, Report]) -> str:
    st, sc = f[STORAGE], f[STRATEGY_ONE_GPU]

    def share(case: str) -> str:
        return _pct(_row(st, case, "biomoe-cli-ep").tokens_per_s, _row(st, case, "biomoe-cli-repeated").tokens_per_s, 1)

    ep, single = _scaling_rate(sc, "dp1xep1"), _scaling_rate(sc, "single-device")
    return (f"storage run: {share(M16)} (16,384), {share(M4)} (4,096); strategy run, Mixtral recipe: "
            f"{_pct(ep['tokens_per_s'], single['tokens_per_s'])} ({kilo(ep['tokens_per_s'])} against "
            f"{kilo(single['tokens_per_s'])}, [docs/scaling.md](scaling.md#one-gpu-what-the-strategy-costs))")


def _goal_memory(f: dict[str, Report]) -> str:
    s = f[SINGLE_RUN]
    fit, hf, bare = (_row(s, M4, c).peak_mem_gb for c in ("biomoe-cli", "hf-bf16-fused", "biomoe-cli-nomaster"))
    return (f"single run: {'no' if fit > hf else 'yes'}: {fit:.1f} against {hf:.1f} GB (mixtral 4,096); without "
            f"master weights {bare:.1f}")


GOALS: tuple[tuple[str, Goal], ...] = (
    ("mixtral-2layer 16,384, `cli.py fit` bf16 ≥ 1.35×", _goal_bf16_16k),
    ("mixtral-2layer 16,384, `cli.py fit` FP8 ≥ 1.75×", _goal_fp8_16k),
    ("mixtral-2layer 4,096, `cli.py fit` ≥ 1.10×", _goal_4k),
    ("dna-small, `cli.py fit` ≥ 1.30×", _goal_dna),
    ("`cli.py fit` ≥ 95 % of the bare loop", _goal_fit_vs_loop),
    ("fp32 master weights cost ≤ 10 %", _goal_masters),
    ("`ExpertParallelStrategy` at one GPU ≥ 95 % of single device", _goal_strategy),
    ("peak memory ≤ HF's", _goal_memory),
)
GOAL_RUNS = (  # (name in the cells, its files)
    ("single run", (SINGLE_RUN,)),
    ("sweep", (SWEEP_SMALL,)),
    ("recipes run (real data)", (RECIPES,)),
    ("storage run (`biomoe-cli-ep` against `biomoe-cli-repeated`)", (STORAGE,)),
    ("compiled-AdamW run", (COMPILED_16K, COMPILED_4K)),
)


def _runs_phrase(rep: Report) -> str:
    records = [r for r in rep.records if r.status == "ok" and r.tokens_per_s]
    counts = _run_counts(rep, records)
    return "one run per row" if counts == "1 run" else f"medians of {counts} interleaved"


def goals(reports: list[Report]) -> str:
    """The goals of the training benchmark against what each run measured, every ratio inside one file."""
    files = {rep.path: rep for rep in reports}
    rows = [[goal, measure(files)] for goal, measure in GOALS]
    lines = table(["goal", "measured"], rows)
    lines[1] = "| --- | --- |"
    runs = [f"{name}, " + ", ".join(f"`{p}` ({files[p].date}, {_runs_phrase(files[p])})" for p in paths)
            for name, paths in GOAL_RUNS]
    bench_reports = [files[p] for _, paths in GOAL_RUNS for p in paths]
    sc = files[STRATEGY_ONE_GPU]
    steps = _scaling_rate(sc, "dp1xep1").get("steps_timed")
    lines += ["", "Ratios against `hf-bf16-fused` of the same file, unless a cell names another row. Runs: "
              + "; ".join(runs) + f". {_machines(bench_reports)}. Strategy run: `{sc.path}` ({sc.date}, one fit "
              f"per layout, the median rate of {steps} timed steps; the file records no GPU, its environment being "
              "the machine that wrote the report: docs/scaling.md gives the run's)."]
    return "\n".join(lines) + "\n"


TABLES: dict[str, Table] = {
    "optimizer-master-storage": Table((SWEEP_MIXTRAL, STORAGE), master_storage),
    "optimizer-master-storage-strategy": Table((SWEEP_MIXTRAL, STORAGE),
                                               functools.partial(master_storage, with_strategy=True)),
    "optimizer-compiled-fit": Table((COMPILED_16K, COMPILED_4K), compiled_fit),
    "optimizer-compiled-fit-detail": Table((COMPILED_16K, COMPILED_4K), compiled_fit_detail),
    "optimizer-step": Table((OPTIMIZER_STEP,), optimizer_step),
    "optimizer-loop-profile": Table((STORAGE,), loop_profile),
    "bench-goals": Table((SINGLE_RUN, SWEEP_SMALL, RECIPES, STORAGE, COMPILED_16K, COMPILED_4K, STRATEGY_ONE_GPU),
                         goals),
}
"""Each table's name (its marker in the documents), files and renderer."""
