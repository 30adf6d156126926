"""Choose the copy expert's decay without looking at the held-out split.

Same inner split as tune_on_training.py: the first 90 % of NC_008253 (the training split) is
written to a temporary FASTA, the table and the order-7 Markov base are fitted on its first 8/9
(0-80 % of the chromosome) and its last 1/9 (80-90 %) plays held-out. k, switch and smoothing stay
at the values tune_on_training.py chose (18, 0.003, 0.005); the grid is over RepeatTable.copy_decay,
with exact matches only (no copies followed) as the reference. Writes
results/quality/repeats/tune_copies_on_training.json; needs `make data`. Run from the repository
root (CPU, about a minute):
    python scripts/repeat_tuning/tune_copies_on_training.py
"""

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from inner_split import INNER_VAL_FRACTION, ROOT, write_training_split  # noqa: E402  (also puts the repo on the path)

from biomoe.data.datamodule import GenomeDataModule  # noqa: E402
from biomoe.genomics.repeat_mix import markov_log_probs, score  # noqa: E402
from biomoe.genomics.repeat_expert import fit_on_training_split  # noqa: E402

rows = []
with tempfile.TemporaryDirectory() as tmp:
    fasta = write_training_split(Path(tmp))
    dm = GenomeDataModule(fasta=[str(fasta)], seq_length=1024, val_fraction=INNER_VAL_FRACTION, rc_prob=0.0)
    dm.setup("validate")
    table = fit_on_training_split(dm)
    base = markov_log_probs(dm, 7)
    exact = score(dm, base, table, 0.003, 0.005)
    rows.append({"follow_copies": False, "copy_decay": None, "mixed_bits_per_base": exact["mixed_bits_per_base"]})
    for decay in (1.0, 0.99, 0.98, 0.95, 0.9, 0.8):
        table.copy_decay = decay
        r = score(dm, base, table, 0.003, 0.005, follow_copies=True)
        rows.append({"follow_copies": True, "copy_decay": decay, "mixed_bits_per_base": r["mixed_bits_per_base"]})
        print(rows[-1], flush=True)
best = min((r for r in rows if r["follow_copies"]), key=lambda r: r["mixed_bits_per_base"])
summary = {"split": "train on chromosome 0-80 %, score 80-90 % (inside the training split)",
           "k": table.k, "switch": 0.003, "smoothing": 0.005, "markov_order": 7,
           "base_bits_per_base": exact["base_bits_per_base"], "positions": exact["positions"],
           "rows": rows, "best": best}
(ROOT / "results/quality/repeats/tune_copies_on_training.json").write_text(json.dumps(summary, indent=2) + "\n")
print("exact only:", rows[0], "best:", best)
