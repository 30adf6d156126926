"""Choose the repeat expert's settings without looking at the held-out split.

The first 90 % of NC_008253 (the training split) is written to a temporary FASTA; its own last
1/9 (positions 80-90 % of the chromosome) then plays held-out, with the table and the order-7
Markov base fitted on the first 80 %. The grid's best setting is the one used on the real held-out
split. Writes results/quality/repeats/tune_on_training.json; needs `make data`. Run from the
repository root (CPU, ~3 minutes):
    python scripts/repeat_tuning/tune_on_training.py
"""

import itertools
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from inner_split import INNER_VAL_FRACTION, ROOT, write_training_split  # noqa: E402  (also puts the repo on the path)

from biomoe.cli.repeat_mix import main  # noqa: E402

rows = []
with tempfile.TemporaryDirectory() as tmp:
    fasta = write_training_split(Path(tmp))
    grid = itertools.product((12, 14, 16, 18, 20, 24), (0.003, 0.01, 0.03, 0.1), (0.005, 0.02, 0.1))
    for k, switch, smoothing in grid:
        out = Path(tmp) / "r.json"
        main([str(fasta), "--val-fraction", str(INNER_VAL_FRACTION), "--markov-order", "7", "--k", str(k),
              "--switch", str(switch), "--smoothing", str(smoothing), "--json", str(out)])
        r = json.loads(out.read_text())
        rows.append({key: r[key] for key in ("k", "switch", "smoothing", "positions", "repeat_fraction",
                                             "base_bits_per_base", "mixed_bits_per_base")})
best = min(rows, key=lambda r: r["mixed_bits_per_base"])
summary = {"split": "train on chromosome 0-80 %, score 80-90 % (inside the training split)",
           "rows": rows, "best": best}
(ROOT / "results/quality/repeats/tune_on_training.json").write_text(json.dumps(summary, indent=2) + "\n")
print("best:", best)
