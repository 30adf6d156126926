"""The per-genome recipe tables of docs/recipes.md and docs/corpus.md, read from their runs' files."""

from __future__ import annotations

import math

from bench.docs_tables.cells import bold_lowest, dated, table
from bench.docs_tables.report import DocsTableError, Report, Table

SUMMARY = "results/recipes/summary.json"
PACKING = "results/corpus/packing-fill.json"

SPECIES = {"ecoli": "*E. coli*", "saureus": "*S. aureus*", "hpylori": "*H. pylori*"}
"""The species prefix of a genome's file label, as a reader names it."""


def number(rep: Report, *keys: str) -> float:
    value = rep.field(*keys)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DocsTableError(f"{rep.path}: '{'.'.join(keys)}' is not a number")
    return float(value)


def curve(rep: Report, *keys: str) -> dict[int, float]:
    """A ``{step: bits/base}`` curve of the file, in step order."""
    points = rep.field(*keys)
    if not isinstance(points, dict) or not points:
        raise DocsTableError(f"{rep.path}: '{'.'.join(keys)}' is not a curve of step: value")
    try:
        return dict(sorted((int(step), float(v)) for step, v in points.items()))
    except (TypeError, ValueError):
        raise DocsTableError(f"{rep.path}: '{'.'.join(keys)}' is not a curve of step: value") from None


def strain(label: str) -> str:
    """``hpylori_sjm180`` as ``*H. pylori* SJM180``."""
    species, _, name = label.partition("_")
    return f"{SPECIES.get(species, species)} {name.upper()}" if name else label


def summary_footer(rep: Report, what: str, keys: str) -> str:
    """The closing line of a summary.json table: runs, machine, date, software and the file's keys."""
    return (f"{what}; {rep.field('device')}, {dated(rep)}; {rep.field('software')}. "
            f"File: `{rep.path}` ({keys}).")


def genome_recipe(reports: list[Report]) -> str:
    """``configs/genome.yaml`` run to its planned length on each genome: the kept checkpoint, the best
    validation and how far below the order-6 Markov baseline of the same positions it ends."""
    (rep,) = reports
    rows = []
    for genome in rep.field("genome_recipe"):
        kept = number(rep, "genome_recipe", genome, "kept_checkpoint", "bits_per_base")
        step = number(rep, "genome_recipe", genome, "kept_checkpoint", "step")
        markov = number(rep, "genome_recipe", genome, "markov6")
        rows.append([strain(genome), f"{number(rep, 'genome_recipe', genome, 'planned_steps'):,.0f}",
                     f"step {step:,.0f}, **{kept:.4f}**",
                     f"{number(rep, 'genome_recipe', genome, 'best_validation'):.4f}",
                     f"{markov:.4f}", f"**{markov - kept:.3f}**"])
    stops = "; ".join(dict.fromkeys(str(rep.field("genome_recipe", g, "stopped_by"))
                                    for g in rep.field("genome_recipe")))
    lines = table(["genome", "planned steps", "kept checkpoint", "best validation", "order-6 Markov",
                   "below Markov"], rows)
    what = f"Held-out bits/base (the last 10 % of each contig); one run per genome, stopped by {stops}"
    lines += ["", summary_footer(rep, what, "`genome_recipe`")]
    return "\n".join(lines) + "\n"


def genome_recipe_curves(reports: list[Report]) -> str:
    """Every validation of the genome-recipe runs: where the curve flattens, and that its lowest point
    is the kept checkpoint."""
    (rep,) = reports
    lines: list[str] = []
    for genome in rep.field("genome_recipe"):
        points = curve(rep, "genome_recipe", genome, "validation")
        name = genome.partition("_")[2].upper() or genome
        lines += table([f"{name} step", *(f"{s:,}" for s in points)],
                       [["bits/base", *bold_lowest(list(points.values()))]])
        lines.append("")
    lines.append(summary_footer(rep, "Held-out bits/base at each validation of the runs above, the lowest in bold",
                             "`genome_recipe.<genome>.validation`"))
    return "\n".join(lines) + "\n"


def last_validation(rep: Report, model: str) -> int:
    steps = rep.field("pretraining", model, "validation")
    if not isinstance(steps, dict) or not steps or not all(str(step).isdigit() for step in steps):
        raise DocsTableError(f"{rep.path}: 'pretraining.{model}.validation' holds no validation by step")
    return max(int(step) for step in steps)


def moe_against_dense(reports: list[Report]) -> str:
    """The last validation of the multi-genome pretraining, MoE and dense control, pooled and per
    genome, with the pooled split's order-6 Markov baseline."""
    (rep,) = reports
    last = {model: last_validation(rep, model) for model in ("moe", "dense")}

    def value(model: str, metric: str) -> float:
        return number(rep, "pretraining", model, "validation", str(last[model]), metric)

    genomes = [m for m in rep.field("pretraining", "moe", "validation", str(last["moe"])) if m.count("/") == 2]
    rows = []
    for label, metric in [("pooled", "val/bits_per_base"), *((m.split("/")[1], m) for m in genomes)]:
        moe, dense = value("moe", metric), value("dense", metric)
        rows.append([label, f"{moe:.4f}", f"{dense:.4f}", f"{moe - dense:+.4f}".replace("-", "−")])
    markov = "val/markov_bits_per_base"
    rows.append(["order-6 Markov (pooled split)", f"{value('moe', markov):.4f}", f"{value('dense', markov):.4f}", ""])
    lines = table(["genome", f"MoE (step {last['moe']:,})", f"dense (step {last['dense']:,})", "MoE − dense"], rows)
    lines += ["", summary_footer(rep, "Validation bits/base (the last 5 % of every training genome) at the last "
                              "validation of one run each", "`pretraining.<model>.validation`, every validation")]
    return "\n".join(lines) + "\n"


def held_out_strains(reports: list[Report]) -> str:
    """Each held-out strain on its last 10 %: its own Markov baseline, the pretrained models zero-shot,
    the MoE fine-tuned on it, and a model of the same budget trained on it alone."""
    (rep,) = reports
    rows, ft_steps, single_steps = [], set(), set()
    for genome in rep.field("held_out"):
        ft = curve(rep, "held_out", genome, "ft_curve")
        single = curve(rep, "held_out", genome, "single_curve")
        ft_steps.add(max(ft))
        single_steps.add(max(single))
        values = [number(rep, "held_out", genome, key) for key in ("markov6", "zero_shot_moe", "zero_shot_dense")]
        rows.append([strain(genome), *bold_lowest(values + [ft[max(ft)], single[max(single)]])])

    def at(steps: set[int]) -> str:
        return f"step {', '.join(f'{s:,}' for s in sorted(steps))}"

    lines = table(["strain", "order-6 Markov (own strain)", "MoE zero-shot", "dense zero-shot",
                   f"MoE fine-tuned, {at(ft_steps)}", f"single-strain model, {at(single_steps)}"], rows)
    lines += ["", summary_footer(rep, "Bits/base on each strain's last 10 %, the lowest of each row in bold; one run "
                              "per cell", "`held_out`, with the fine-tuning and single-strain curves at every "
                              "validation")]
    return "\n".join(lines) + "\n"


def kilobases(n: float) -> str:
    """Three significant figures: ``40.8 kb``, ``881 kb``, ``1.20 Mb``."""
    value, unit = (n / 1e6, "Mb") if n >= 999_500 else (n / 1e3, "kb")
    digits = max(0, 2 - math.floor(math.log10(value))) if value > 0 else 0
    return f"{value:,.{digits}f} {unit}"


def packing_fill(reports: list[Report]) -> str:
    """How full packed rows are on the corpus: the records shorter than a row (which fixed windows
    would skip) and the share of real bases per training and validation row."""
    (rep,) = reports
    rows = []
    lengths = rep.field("by_seq_length")
    for length in sorted(lengths, key=int):
        def get(key: str, length: str = length) -> float:
            return number(rep, "by_seq_length", length, key)

        rows.append([f"{int(length):,}", f"{get('records_shorter_than_seq_length'):,.0f} "
                     f"({kilobases(get('bases_in_them'))})",
                     f"{100 * get('train_real_fraction'):.2f} %", f"{100 * get('val_real_fraction'):.2f} %"])
    lines = table(["`seq_length`", "records shorter (their bases)", "real bases per training row",
                   "per validation row"], rows)
    lines[1] = "| ---: | ---: | ---: | ---: |"
    lines += ["", f"One data-module setup per length on the `make data-corpus` store of all splits (no training); "
              f"{rep.field('machine')}, {dated(rep)}. File: `{rep.path}` (command in it)."]
    return "\n".join(lines) + "\n"


TABLES: dict[str, Table] = {
    "recipes-genome": Table((SUMMARY,), genome_recipe),
    "recipes-genome-curves": Table((SUMMARY,), genome_recipe_curves),
    "recipes-moe-vs-dense": Table((SUMMARY,), moe_against_dense),
    "recipes-held-out": Table((SUMMARY,), held_out_strains),
    "corpus-packing": Table((PACKING,), packing_fill),
}
