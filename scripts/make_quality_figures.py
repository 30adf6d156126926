"""Redraw the held-out curves of docs/quality.md from the run summaries in
results/quality/run-summaries/.

    python scripts/make_quality_figures.py

Each summary (written by ``scripts/summarize_run.py``) holds a run's validation curve; the figures
are drawn by ``biomoe.training.reports.plots.plot_validation_comparison``, which reads CSV, so each curve
is handed to it as a two-column CSV in a temporary folder.
"""

from __future__ import annotations

import csv
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root, when biomoe is not installed

from biomoe.training.reports.plots import plot_validation_comparison  # noqa: E402

QUALITY = ROOT / "results" / "quality"
RUNS = QUALITY / "run-summaries"
HELD_OUT = "val/bits_per_base"
WITH_REPEAT_EXPERT = "val/repeat_mix_bits_per_base"

FIGURES = {
    "validation.png": ("E. coli 536, last 10% of the chromosome held out (one H200)", {
        "MoE, ecoli-quality (1,200 steps, dropout 0.1)": ("ecoli-quality", HELD_OUT),
        "dense, same tokens": ("ecoli-quality-dense", HELD_OUT),
        "MoE, ecoli-long (1,800 steps, dropout 0.2)": ("ecoli-long", HELD_OUT),
        "dense, same tokens as ecoli-long": ("ecoli-long-dense", HELD_OUT),
        "MoE, 300 s TimeBudget = 2,400 steps, dropout 0.1": ("ecoli-quality-timebudget300s", HELD_OUT),
    }),
    "validation-variants.png": ("E. coli 536 held out: regularisation variants (one H200 each)", {
        "MoE, ecoli-quality (reference recipe)": ("ecoli-quality", HELD_OUT),
        "v1: weight decay 1.0, 2,000 steps": ("ecoli-v1-wd1", HELD_OUT),
        "v2: v1 + EMA 0.997": ("ecoli-v2-wd1-ema", HELD_OUT),
        "v3: hidden 768, dropout 0.3, wd 1.0, EMA, 1,400 steps": ("ecoli-v3-wide768", HELD_OUT),
        "v4: dropout 0.2, wd 2.0, EMA, 2,800 steps": ("ecoli-v4-wd2-long", HELD_OUT),
    }),
    "validation-mutation.png": ("E. coli 536 held out: input mutation (one H200 each)", {
        "v2: hidden 512, wd 1.0, EMA (no mutation)": ("ecoli-v2-wd1-ema", HELD_OUT),
        "v10: v2 + 5 % input mutation": ("ecoli-v10-wd1-ema-mut5", HELD_OUT),
        "v11: v2 + 10 % input mutation, 3,600 steps": ("ecoli-v11-wd1-ema-mut10-long", HELD_OUT),
        "v3: hidden 768, dropout 0.3, wd 1.0, EMA (no mutation)": ("ecoli-v3-wide768", HELD_OUT),
        "v9: v3 + 5 % input mutation, 2,600 steps": ("ecoli-v9-wide768-mut5", HELD_OUT),
        "v12: v3 + 10 % input mutation, 2,300 steps": ("ecoli-v12-wide768-mut10", HELD_OUT),
    }),
    "validation-repeat-mix.png": ("E. coli 536 held out: configs/ecoli-mutation.yaml, "
                                  "network alone and with the repeat expert (one H200)", {
        "ecoli-mutation network alone": ("ecoli-v11-wd1-ema-mut10-long-repeat-expert", HELD_OUT),
        "same network mixed with the repeat expert": ("ecoli-v11-wd1-ema-mut10-long-repeat-expert",
                                                      WITH_REPEAT_EXPERT),
    }),
}
REFERENCES = {"transformers MixtralForCausalLM, 5 min": 1.853, "order-7 Markov (best k)": 1.9358,
              "target": 1.80}


def curve_csv(run: str, column: str, folder: Path) -> Path:
    """One summary's validation curve of ``column`` as a ``step,<column>`` CSV in ``folder``."""
    validation = json.loads((RUNS / f"{run}.json").read_text())["validation"]
    path = folder / f"{run}-{column.replace('/', '_')}.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", column])
        writer.writerows((step, value) for step, value in zip(validation["step"], validation[column])
                         if value is not None)
    return path


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        for name, (title, curves) in FIGURES.items():
            runs = {label: (curve_csv(run, column, Path(tmp)), column) for label, (run, column) in curves.items()}
            print(plot_validation_comparison(runs, QUALITY / name, REFERENCES, title=title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
