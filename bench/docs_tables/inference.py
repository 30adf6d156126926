"""The use commands' tables: each command a fresh process, against Hugging Face's."""

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


TABLES: dict[str, Table] = {
    "use-commands": Table(("results/bench/inference-gpu/score-embed.json",
                           "results/bench/inference-gpu/variants-generate.json"), use_commands),
}
