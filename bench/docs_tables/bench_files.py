"""The benchmark reports the optimizer and goals tables read, and how such a table reads one: the
measured row or a one-line error naming the file, ratios inside one file, its machine and run counts.

Every ratio is taken inside one file, whose rows ran interleaved in one run: two files are two runs
on different days, so a ratio across them would mix run-to-run drift into the comparison."""

from __future__ import annotations

from bench.docs_tables.cells import best_fp8, pick
from bench.docs_tables.report import DocsTableError, Report
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


def measured(rep: Report, case: str, contender: str, precision: str = "bf16") -> BenchRecord:
    """The measured row, or a one-line error naming the file: a table must not lose a row silently."""
    record = pick(rep.records, case, contender, precision)
    if record is None or not record.tokens_per_s:
        raise DocsTableError(f"{rep.path}: no measured {case}/{contender}/{precision} row")
    return record


def measured_fp8(rep: Report, case: str, contender: str) -> BenchRecord:
    record = best_fp8(rep.records, case, contender)
    if record is None:
        raise DocsTableError(f"{rep.path}: no measured FP8 row of {case}/{contender}")
    return record


def times(a: BenchRecord, b: BenchRecord) -> str:
    return f"{a.tokens_per_s / b.tokens_per_s:.2f}×"


def percent(a: float, b: float, digits: int = 0) -> str:
    return f"{100 * a / b:.{digits}f} %"


def short(path: str) -> str:
    return f"`{path.removeprefix('results/bench/')}`"


def software(rep: Report) -> str:
    env = rep.data.get("environment", {})
    return (f"One {rep.gpu()}; torch {env.get('torch')}, Transformer Engine {env.get('transformer_engine')}, "
            f"transformers {env.get('transformers')}")


def machines(reports: list[Report]) -> str:
    """The machine and software once if every file records the same, else file by file."""
    distinct = list(dict.fromkeys(software(rep) for rep in reports))
    if len(distinct) == 1:
        return distinct[0]
    return "; ".join(f"{short(rep.path)}: {software(rep)}" for rep in reports)


def run_counts(rep: Report, records: list[BenchRecord]) -> str:
    """``3 runs`` or ``2 runs (of 3 asked)``, read from the rows' own runs, not the command."""
    counts = sorted({len(r.runs) or 1 for r in records})
    text = "–".join(str(n) for n in counts) + (" run" if counts == [1] else " runs")
    asked = rep.data.get("settings", {}).get("repeats")
    return text + (f" (of {asked} asked)" if asked and max(counts) < asked else "")


def run_spread(records: list[BenchRecord]) -> float:
    """The largest distance of one run's rate from its row's median, in percent."""
    return max((100 * abs(run / r.tokens_per_s - 1) for r in records for run in r.runs), default=0.0)
