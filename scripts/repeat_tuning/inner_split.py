"""The inner split both tuning scripts score on, so the held-out split is never looked at.

The first 90 % of NC_008253 (the training split of the E. coli 536 runs) is written as one FASTA; with
``--val-fraction 1/9`` its first 8/9 (0-80 % of the chromosome) fits the table and the Markov base
and its last 1/9 (80-90 %) plays held-out.
"""

import gzip
import sys
from pathlib import Path

from Bio import SeqIO

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root, when biomoe is not installed
INNER_VAL_FRACTION = 1 / 9


def write_training_split(folder: Path) -> Path:
    """The training split of E. coli 536 (first 90 % of the chromosome) as ``folder``/...fa."""
    record = next(SeqIO.parse(gzip.open(ROOT / "data/large/ecoli536_NC_008253.fna.gz", "rt"), "fasta"))
    sequence = str(record.seq)
    fasta = Path(folder) / "ecoli536_training_split.fa"
    fasta.write_text(f">{record.id}_first90\n{sequence[: len(sequence) - round(len(sequence) * 0.1)]}\n")
    return fasta
