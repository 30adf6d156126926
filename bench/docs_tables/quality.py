"""The model-quality tables: the E. coli runs' summaries, the Markov and repeat-expert tables in
results/quality, and the corpus study of MoE against dense in results/experts."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from bench.docs_tables.cells import bold_lowest, dated, table
from bench.docs_tables.experts import EXPERT_VARIANTS
from bench.docs_tables.report import DocsTableError, Report, Table


RUNS = "results/quality/run-summaries/"
MARKOV_ECOLI = "results/quality/markov_ecoli536.json"
REPEATS = "results/quality/repeats/"
STUDY = "results/experts/study/"
GROUPS = ("seen species", "held-out strains", "held-out species")
"""The corpus study's groups of genomes (``data/corpus-splits.tsv``), in the order the tables give them."""

MUTATIONS_MACHINE = "one NVIDIA H100 80GB HBM3"
"""The GPU that scored the study's zero-shot mutations: named in ``results/experts/study/mutations.md``
beside the JSON files, which record no machine."""


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


def _files(reports: list[Report]) -> str:
    return "Files: " + ", ".join(f"`{rep.path}`" for rep in reports) + "."


def _distinct(reports: list[Report], key: str) -> str:
    return "; ".join(dict.fromkeys(str(rep.field(key)) for rep in reports))


def _markov_rows(rep: Report) -> dict[int, float]:
    """A ``cli.py markov`` file's bits/base by order."""
    try:
        return {row["order"]: row["bits_per_base"] for row in rep.field("rows")}
    except (KeyError, TypeError) as err:
        raise DocsTableError(f"{rep.path}: not a Markov table (a row without {err})") from None


def markov_orders(reports: list[Report]) -> str:
    """Held-out bits/base of the order-k Markov models of ``cli.py markov``, one row per file (both
    strands counted, or the forward strand only), the best order of each row in bold."""
    orders = sorted(_markov_rows(reports[0]))
    rows = []
    for rep in reports:
        by_order = _markov_rows(rep)
        if sorted(by_order) != orders:
            raise DocsTableError(f"{rep.path}: orders {sorted(by_order)}, not {reports[0].path}'s {orders}")
        strands = "both strands counted" if rep.field("reverse_complement") else "forward strand only (`--no-rc`)"
        rows.append([f"bits/base, {strands}", *bold_lowest([by_order[k] for k in orders])])
    lines = table(["order k", *map(str, orders)], rows)
    lines[1] = "|" + "---|" * (len(orders) + 1)
    first = reports[0]
    held_out = first.field("val_fraction")
    seconds = " and ".join(f"{rep.field('seconds'):.0f} s" for rep in reports)
    runs = "One run" if len(reports) == 1 else "One run each"
    dates = "; ".join(dict.fromkeys(dated(rep) for rep in reports))
    lines += ["", f"Order-k Markov models, add-α smoothing α = {first.field('alpha'):g}, fitted on the first "
              f"{100 * (1 - held_out):.0f} % of the chromosome and scored on the last {100 * held_out:.0f} %: "
              f"{first.field('rows', 0, 'positions'):,} held-out bases in windows of {first.field('seq_length'):,}. "
              f"{runs}, `cli.py markov` on a CPU ({seconds} for all orders; the file names no machine), {dates}. "
              + _files(reports)]
    return "\n".join(lines) + "\n"


def _repeat_cells(rep: Report, k: int, unit: str = "") -> list[float | str]:
    """Alone, mixed, and the held-out bases after a training k-mer of one ``repeat-mix`` file."""
    if rep.field("k") != k:
        raise DocsTableError(f"{rep.path}: k = {rep.field('k')}, the other files k = {k}")
    return [rep.field("base_bits_per_base"), rep.field("mixed_bits_per_base"),
            f"{100 * rep.field('repeat_fraction'):.2f} %: {rep.field('base_on_repeats_bits_per_base'):.3f} → "
            f"{rep.field('mixed_on_repeats_bits_per_base'):.3f}{unit}"]


def repeat_expert(reports: list[Report], labels: tuple[str, ...]) -> str:
    """A base model alone and mixed with the repeat expert (``repeat-mix``): first the Markov file, then
    each network as (its run summary, the ``repeat-mix --ckpt`` re-score of its final checkpoint).
    ``labels`` name the networks and may use the summary's fields, e.g. ``{wall_clock_s}``."""
    markov, *rest = reports
    runs, rescores = rest[0::2], rest[1::2]
    if len(labels) != len(runs) or len(runs) != len(rescores):
        raise DocsTableError(f"{len(labels)} labels for {len(runs)} run summaries and {len(rescores)} re-scores")
    k = markov.field("k")
    rows = [[f"{markov.field('base')} (fitted on the training split)", *_repeat_cells(markov, k, " bits/base")]]
    for label, run, rescore in zip(labels, runs, rescores):
        try:
            name = label.format(**run.data)
        except (KeyError, ValueError) as err:
            raise DocsTableError(f"{run.path}: no {err} for the label {label!r}") from None
        rows.append([name, *_repeat_cells(rescore, k)])
    mixed = bold_lowest([row[2] for row in rows])
    rows = [[row[0], f"{row[1]:.4f}", cell, row[3]] for row, cell in zip(rows, mixed)]
    lines = table(["base model", "alone", "mixed with the repeat expert", f"held-out bases after a training {k}-mer"],
                  rows)
    lines[1] = "| --- | ---: | ---: | ---: |"
    lines += ["", f"Held-out bits/base on the last 10 % of *E. coli* 536 ({markov.field('positions'):,} bases); "
              f"repeat expert k = {k}, switch {markov.field('switch'):g}, smoothing {markov.field('smoothing'):g}. "
              f"Markov row: `cli.py repeat-mix` on a CPU, one run, {dated(markov)}. Network rows: `repeat-mix --ckpt` "
              "re-scores of each run's final checkpoint outside Lightning (the re-score files record no machine "
              f"or date); the runs trained on {_distinct(runs, 'hardware')}; {_distinct(runs, 'date')}; "
              f"{_distinct(runs, 'software')}. " + _files(reports)]
    return "\n".join(lines) + "\n"


def repeat_copies(reports: list[Report], label: str) -> str:
    """Exact matches against following copies past mismatches: the Markov base's two ``repeat-mix``
    files, then a network run that logged both mixtures at its validations (``label`` may use
    ``{step}``, its last validation's step)."""
    exact, copies, run = reports
    if exact.data.get("follow_copies") or not copies.data.get("follow_copies"):
        raise DocsTableError(f"{exact.path}, {copies.path}: not an exact-match file then a follow_copies file")
    if exact.field("base_bits_per_base") != copies.field("base_bits_per_base"):
        raise DocsTableError(f"{copies.path}: a base model other than {exact.path}'s")
    last = run.field("last")
    try:
        network = [last["val/bits_per_base"], last["val/repeat_mix_bits_per_base"],
                   last["val/repeat_copy_mix_bits_per_base"]]
    except KeyError as err:
        raise DocsTableError(f"{run.path}: its last validation logged no {err}") from None
    rows = [[exact.field("base"), *bold_lowest([exact.field("base_bits_per_base"), exact.field("mixed_bits_per_base"),
                                                 copies.field("mixed_bits_per_base")])],
            [label.format(step=f"{run.field('last', 'step'):,}"), *bold_lowest(network)]]
    lines = table(["base model", "alone", "exact matches", "following copies too"], rows)
    lines[1] = "| --- | ---: | ---: | ---: |"
    lines += ["", f"Held-out bits/base on the last 10 % of *E. coli* 536 ({exact.field('positions'):,} bases); repeat "
              f"expert k = {exact.field('k')}, switch {exact.field('switch'):g}, smoothing "
              f"{exact.field('smoothing'):g}. Markov row: `cli.py repeat-mix` on a CPU, one run each, "
              f"{dated(exact)}. Network row: the run's last validation in Lightning ({run.field('note')}); "
              f"{run.field('hardware')}, {run.field('date')}; {run.field('software')}. " + _files(reports)]
    return "\n".join(lines) + "\n"


def _contenders(rep: Report) -> list[dict[str, Any]]:
    """A ``bench.experts report`` summary's contenders in the order of ``EXPERT_VARIANTS`` (dense first),
    others after them as the report lists them."""
    found = rep.field("contenders")
    if not isinstance(found, list) or not found:
        raise DocsTableError(f"{rep.path}: not a bench.experts report (no 'contenders' list)")
    for c in found:
        for key in ("name", "curve", "tokens_per_s"):
            if key not in c:
                raise DocsTableError(f"{rep.path}: contender {c.get('name', '?')} has no '{key}'")
        missing = [g for g in GROUPS if not c["curve"].get(g)]
        if missing:
            raise DocsTableError(f"{rep.path}: contender {c['name']} has no curve for {', '.join(missing)}")
    order = list(EXPERT_VARIANTS)
    return sorted(found, key=lambda c: order.index(_variant(c["name"])) if _variant(c["name"]) in order
                  else len(order))


def _variant(name: str, labels: dict[str, str] | None = None) -> str:
    """``base-moe`` as ``moe`` (or its label in ``labels``)."""
    variant = name.split("-", 1)[-1]
    return (labels or {}).get(variant, variant)


def _at(curve: list[list[float]], tokens: int) -> float:
    return next(v for t, v in curve if t == tokens)


def corpus_side_by_side(reports: list[Report]) -> str:
    """The short corpus study (``bench.experts run``): each contender at its last validation, then the
    longer runs again at the last validation every contender reached (equal tokens)."""
    (rep,) = reports
    contenders = _contenders(rep)
    last = {c["name"]: max(t for t, _ in c["curve"][GROUPS[0]]) for c in contenders}
    common = min(last.values())
    rows = [[_variant(c["name"]), f"{last[c['name']] / 1e6:.1f}M",
             *(f"{c['curve'][g][-1][1]:.4f}" for g in GROUPS), f"{c['tokens_per_s'] / 1e3:,.0f}k"]
            for c in contenders]
    for c in contenders:
        if last[c["name"]] > common:
            rows.append([f"{_variant(c['name'])} at {common / 1e6:.1f}M", f"{common / 1e6:.1f}M",
                         *(f"{_at(c['curve'][g], common):.4f}" for g in GROUPS), ""])
    lines = table(["model", "tokens", *GROUPS, "tokens/s side by side"], rows)
    lines[1] = "| --- | ---: | ---: | ---: | ---: | ---: |"
    lines += ["", "Mean held-out bits/base over the genomes of each group at each run's last validation (a run "
              "stopped by the time limit ends earlier), then the longer runs again at the last validation "
              f"every run reached. One run each: {rep.field('machine')}; {dated(rep)}. Tokens/s: the median of "
              "each fit's logged training rate while the fits shared the GPU. File: "
              f"`{rep.path}` (command in `summary.md` beside it)."]
    return "\n".join(lines) + "\n"


def corpus_study(reports: list[Report]) -> str:
    """The long corpus study (``bench.experts study``, each model alone): bits/base at the budget, the
    lowest held-out-species point, the training rate and the training GPU time."""
    (rep,) = reports
    contenders = _contenders(rep)
    budgets = {max(t for t, _ in c["curve"][GROUPS[0]]) for c in contenders}
    if len(budgets) != 1:
        raise DocsTableError(f"{rep.path}: the contenders stopped at different tokens ({sorted(budgets)})")
    for c in contenders:
        if not c.get("seconds"):
            raise DocsTableError(f"{rep.path}: contender {c['name']} logged no training seconds")
    columns = [bold_lowest([c["curve"][g][-1][1] for c in contenders]) for g in GROUPS]
    lowest = [min(c["curve"]["held-out species"], key=lambda p: (p[1], p[0])) for c in contenders]
    lowest_cells = bold_lowest([v for _, v in lowest])
    rows = [[_variant(c["name"], EXPERT_VARIANTS), *(col[i] for col in columns),
             f"{lowest_cells[i]} ({lowest[i][0] / 1e6:.0f}M)", f"{c['tokens_per_s'] / 1e3:,.0f}k",
             f"{c['seconds'][-1][1] / 60:.1f} min"] for i, c in enumerate(contenders)]
    lines = table(["model", *GROUPS, "lowest held-out species (at)", "tokens/s alone", "training GPU time"], rows)
    lines[1] = "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    lines += ["", f"Mean held-out bits/base over the genomes of each group at {budgets.pop() / 1e6:.0f}M tokens, the "
              "last validation; lowest: the lowest held-out-species validation and its tokens; the lowest of "
              f"each column in bold. One run each, each model alone on one {rep.field('machine')}, {dated(rep)}. "
              "Tokens/s: the median of the fit's logged training rate; training GPU time: the fit's own "
              "`train/seconds` at its last validation (validation left out). File: "
              f"`{rep.path}` (command, tokens and GPU time to reach dense, rising curves and power-law fits in "
              "`summary.md` beside it)."]
    return "\n".join(lines) + "\n"


def _aurocs(rep: Report, genome: str, scorer: str) -> tuple[float, float]:
    auroc = rep.field("genomes", genome, scorer, "auroc")
    try:
        return auroc["stop_gain_vs_synonymous"], auroc["missense_vs_synonymous"]
    except (KeyError, TypeError) as err:
        raise DocsTableError(f"{rep.path}: {genome} {scorer} has no AUROC {err}") from None


def _snv_counts(rep: Report, genome: str) -> str:
    return "/".join(f"{rep.field('genomes', genome, 'counts', c):,}" for c in ("synonymous", "missense", "stop_gain"))


def study_mutations(reports: list[Report]) -> str:
    """Zero-shot mutations of the study's models (``cli.py mutations``, one file per model): stop-gain
    and missense against synonymous AUROC on each genome, and the order-k Markov chain's."""
    first = reports[0]
    genomes = list(first.field("genomes"))
    markov = {g: _aurocs(first, g, "markov") for g in genomes}
    rows = []
    for rep in reports:
        if list(rep.field("genomes")) != genomes or any(_aurocs(rep, g, "markov") != markov[g] for g in genomes):
            raise DocsTableError(f"{rep.path}: other genomes or another Markov baseline than {first.path}")
        model = Path(rep.path).stem.removeprefix("mutations-")
        rows.append([EXPERT_VARIANTS.get(model, model), *(f"{s:.3f} / {m:.3f}" for s, m in
                                                          (_aurocs(rep, g, "model") for g in genomes))])
    rows.append([f"order-{first.field('markov_order')} Markov", *(f"{markov[g][0]:.3f} / {markov[g][1]:.3f}"
                                                                 for g in genomes)])
    lines = table(["scorer", *(f"`{g}`" for g in genomes)], rows)
    counts = "; ".join(f"`{g}` {_snv_counts(first, g)}" for g in genomes)
    lines += ["", "AUROC of stop-gain / missense SNVs against synonymous ones (0.5 is chance; above 0.5 the scorer "
              "ranks the change to the protein as less likely than a synonymous one). "
              f"{first.field('codons'):,} codons a genome (seed {first.field('seed')}), all nine SNVs of each, "
              f"windows of {first.field('window'):,}; SNVs "
              f"synonymous/missense/stop-gain: {counts}. The Markov chain is fitted on each scored genome itself "
              f"({first.field('markov_fit')}). One run each, scored on {MUTATIONS_MACHINE} (named "
              "in `mutations.md` beside the files; they record no machine), " + dated(first) + ". " + _files(reports)]
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
    "quality-markov-orders": Table((MARKOV_ECOLI,), markov_orders),
    "quality-repeat-expert": Table(
        (f"{REPEATS}heldout_markov7.json",) + tuple(f"{RUNS}{n}{suffix}" for n in (
            "ecoli-mutation", "ecoli-v11-wd1-ema-mut10-long-repeat-expert", "ecoli-v9-wide768-mut5-repeat-expert")
            for suffix in (".json", ".repeat-mix.json")),
        functools.partial(repeat_expert, labels=(
            "**`configs/ecoli-mutation.yaml`** ({wall_clock_s} s, {steps:,} steps)",
            "the same recipe, second run (`ecoli-v11` + `RepeatMixture`)",
            "v9 (hidden 768, 5 % mutation) + `RepeatMixture`"))),
    "quality-repeat-copies": Table(
        (f"{REPEATS}heldout_markov7.json", f"{REPEATS}heldout_markov7_copies.json",
         f"{RUNS}ecoli-mutation-1000-steps-follow-copies.json"),
        functools.partial(repeat_copies, label="`ecoli-mutation` network, 1,000-step schedule, at step {step}")),
    "experts-corpus-side-by-side": Table(("results/experts/summary.json",), corpus_side_by_side),
    "experts-corpus-study": Table((f"{STUDY}summary.json",), corpus_study),
    "experts-study-mutations": Table(tuple(f"{STUDY}mutations-{m}.json" for m in ("dense", "moe", "fine")),
                                     study_mutations),
}
