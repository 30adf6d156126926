"""Redraw results/quality/validation*.png from the committed metrics
(run from the repo root):
    python results/quality/make_figure.py
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repository root, when biomoe is not installed

from biomoe.plots import plot_validation_comparison  # noqa: E402
RUNS = {
    "MoE, ecoli-quality (1,200 steps, dropout 0.1)": "ecoli-quality",
    "dense, same tokens": "ecoli-quality-dense",
    "MoE, ecoli-long (1,800 steps, dropout 0.2)": "ecoli-long",
    "dense, same tokens as ecoli-long": "ecoli-long-dense",
    "MoE, 300 s TimeBudget = 2,400 steps, dropout 0.1": "timebudget300s-dropout0.1",
}
VARIANTS = {  # device call E: four regularisation variants at once, one per GPU (variants-run/)
    "MoE, ecoli-quality (reference recipe)": "ecoli-quality",
    "v1: weight decay 1.0, 2,000 steps": "variants-run/ecoli-v1-wd1",
    "v2: v1 + EMA 0.997": "variants-run/ecoli-v2-wd1-ema",
    "v3: hidden 768, dropout 0.3, wd 1.0, EMA, 1,400 steps": "variants-run/ecoli-v3-wide768",
    "v4: dropout 0.2, wd 2.0, EMA, 2,800 steps": "variants-run/ecoli-v4-wd2-long",
}
MUTATION = {  # device calls J, K and L: input-base mutation (data.mutation_prob), one H200 each
    "v2: hidden 512, wd 1.0, EMA (no mutation)": "variants-run/ecoli-v2-wd1-ema",
    "v10: v2 + 5 % input mutation": "variants-run/ecoli-v10-wd1-ema-mut5",
    "v11: v2 + 10 % input mutation, 3,600 steps": "variants-run/ecoli-v11-wd1-ema-mut10-long",
    "v3: hidden 768, dropout 0.3, wd 1.0, EMA (no mutation)": "variants-run/ecoli-v3-wide768",
    "v9: v3 + 5 % input mutation, 2,600 steps": "variants-run/ecoli-v9-wide768-mut5",
    "v12: v3 + 10 % input mutation, 2,300 steps": "variants-run/ecoli-v12-wide768-mut10",
}
REPEAT_MIX = {  # device call N: the shipped `cli.py fit --config configs/ecoli-mutation.yaml`
    "ecoli-mutation network alone": ("ecoli-mutation/runs/version_0/metrics.csv", "val/bits_per_base"),
    "same network mixed with the repeat expert": ("ecoli-mutation/runs/version_0/metrics.csv",
                                                  "val/repeat_mix_bits_per_base"),
}
REFERENCES = {"transformers Mixtral, 5 min (issue #6)": 1.853, "order-7 Markov (best k)": 1.9358,
              "target": 1.80}

if __name__ == "__main__":
    out = plot_validation_comparison({label: HERE / run / "metrics.csv" for label, run in RUNS.items()},
                                     HERE / "validation.png", REFERENCES,
                                     title="E. coli 536, last 10% of the chromosome held out (one H200)")
    print(out)
    out = plot_validation_comparison({label: HERE / run / "metrics.csv" for label, run in VARIANTS.items()},
                                     HERE / "validation-variants.png", REFERENCES,
                                     title="E. coli 536 held out: regularisation variants (one H200 each)")
    print(out)
    out = plot_validation_comparison({label: (HERE / path, column) for label, (path, column) in REPEAT_MIX.items()},
                                     HERE / "validation-repeat-mix.png", REFERENCES,
                                     title="E. coli 536 held out: configs/ecoli-mutation.yaml, "
                                           "network alone and with the repeat expert (one H200)")
    print(out)
    runs = {label: HERE / run / "metrics.csv" for label, run in MUTATION.items()}
    out = plot_validation_comparison({k: v for k, v in runs.items() if v.exists()},
                                     HERE / "validation-mutation.png", REFERENCES,
                                     title="E. coli 536 held out: input mutation (one H200 each)")
    print(out)
