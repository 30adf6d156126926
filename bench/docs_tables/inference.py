"""The use commands' tables: each command a fresh process against Hugging Face's, and the earlier
in-process diagnostic."""

from __future__ import annotations

from bench.docs_tables.cells import ratio, table
from bench.docs_tables.report import DocsTableError, Report, Table


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


IN_PROCESS_TASKS = {"score-fasta": "score-fasta", "embed": "embed `--pool window`",
                     "score-variants": "score-variants, {variants:,} SNVs", "generate-64": "generate, 64 samples"}
IN_PROCESS_UNITS = {"bases/s": ("Mbp/s", 1e6), "variants/s": ("SNV/s", 1.0)}


def _rate(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit not in IN_PROCESS_UNITS or value < 1e5 and unit == "bases/s":  # generation: bases, not megabases
        return f"{value:,.0f} {unit}"
    name, scale = IN_PROCESS_UNITS[unit]
    return f"{value / scale:,.2f} {name}" if scale > 1 else f"{value:,.0f} {name}"


def in_process(reports: list[Report]) -> str:
    """The use commands run inside the bench's own process (a diagnostic, not how users run them):
    the whole command's rate (wall) and the rate without loading (compute), each against HF's on the
    same basis, and each side's peak GPU memory."""
    rows = []
    for rep in reports:
        by = {(r["network"], r["task"], r["contender"]): r for r in rep.data.get("records", [])
              if r.get("status") == "ok"}
        if not by:
            raise DocsTableError(f"{rep.path}: not an inference report (no measured 'records')")
        for (network, task, contender), ours in by.items():
            if contender != "biomoe" or (network, task, "hf") not in by:
                continue
            hf = by[(network, task, "hf")]
            label = IN_PROCESS_TASKS.get(task, task).format(variants=rep.data["settings"].get("variants") or 0)
            unit = ours.get("unit", "")

            def share(a: float | None, b: float | None) -> str:
                return ratio(a / b if a and b else None)

            rows.append([network, label, _rate(ours.get("wall_rate"), unit), _rate(ours.get("compute_rate"), unit),
                         _rate(hf.get("wall_rate"), unit), _rate(hf.get("compute_rate"), unit),
                         share(ours.get("wall_rate"), hf.get("wall_rate")),
                         share(ours.get("compute_rate"), hf.get("compute_rate")),
                         f"{ours['peak_mem_gb']:.1f} / {hf['peak_mem_gb']:.1f} GB"
                         if ours.get("peak_mem_gb") and hf.get("peak_mem_gb") else "—"])
    lines = table(["network", "task", "biomoe wall", "biomoe compute", "HF wall", "HF compute", "wall ratio",
                   "compute ratio", "peak GPU memory, biomoe / HF"], rows)
    env = reports[0].data.get("environment", {})
    repeats = sorted({str(rep.data["settings"].get("repeats")) for rep in reports})
    dates = sorted({rep.date for rep in reports})
    lines += ["", f"In-process diagnostic: each command inside the bench's process after one warm-up, medians of "
              f"{', '.join(repeats)} runs interleaved with HF; each ratio on its own basis. One {reports[0].gpu()}, "
              f"{' to '.join(dates) if len(dates) > 1 else dates[0]}; torch {env.get('torch')}, Transformer Engine "
              f"{env.get('transformer_engine')}, transformers {env.get('transformers')}. Files: "
              + ", ".join(f"`{rep.path}`" for rep in reports) + "."]
    return "\n".join(lines) + "\n"


TABLES: dict[str, Table] = {
    "inference-in-process": Table(tuple(f"results/bench/inference/{name}.json" for name in (
        "genome-score", "genome-generate", "dna-small-score", "dna-small-more")), in_process),
    "use-commands": Table(("results/bench/inference-gpu/score-embed.json",
                           "results/bench/inference-gpu/variants-generate.json"), use_commands),
}
