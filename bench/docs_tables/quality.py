"""The training-quality tables, read from the runs' summaries in results/quality."""

from __future__ import annotations

import functools
from pathlib import Path

from bench.docs_tables.cells import table
from bench.docs_tables.report import DocsTableError, Report, Table


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


TABLES: dict[str, Table] = {
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
}
