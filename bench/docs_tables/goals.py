"""The goals table of the training benchmark: each goal against what each run measured, every ratio
inside one file (:mod:`bench.docs_tables.bench_files`)."""

from __future__ import annotations

from typing import Any, Callable

from bench.docs_tables.bench_files import (COMPILED_4K, COMPILED_16K, DNA, M4, M16, RECIPES, SINGLE_RUN, STORAGE,
                                           STRATEGY_ONE_GPU, SWEEP_SMALL, machines as _machines, measured as _row,
                                           measured_fp8 as _fp8, percent as _pct, run_counts as _run_counts,
                                           times as _x)
from bench.docs_tables.cells import kilo, table
from bench.docs_tables.report import DocsTableError, Report, Table


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
    "bench-goals": Table((SINGLE_RUN, SWEEP_SMALL, RECIPES, STORAGE, COMPILED_16K, COMPILED_4K, STRATEGY_ONE_GPU),
                         goals),
}
"""The table's name (its marker in the documents), files and renderer."""
