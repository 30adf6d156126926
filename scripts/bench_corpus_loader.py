"""Batches/s the training DataLoader delivers from a corpus store and from the FASTA it was made from:
configs/corpus-study.yaml's data settings (seq_length 1024, batch 64, packing on, RC 0.5, sampling
temperature 2), 2 workers, three interleaved runs of 40 batches each after 3 to start the workers.

    python scripts/bench_corpus_loader.py data/large/corpus.store data/large/corpus
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import warnings

import yaml

from biomoe.data.datamodule import GenomeDataModule


def batches_per_s(source: str, val_files: list[str], batches: int = 40) -> float:
    dm = GenomeDataModule(fasta=source, seq_length=1024, batch_size=64, val_files=val_files, val_fraction=0.01,
                          sampling_temperature=2.0, num_workers=2, rc_prob=0.5, packing=True)
    dm.setup("fit")
    batch_iter = iter(dm.train_dataloader())
    for _ in range(3):
        next(batch_iter)
    started = time.perf_counter()
    for _ in range(batches):
        next(batch_iter)
    return batches / (time.perf_counter() - started)


def main(store: str, fasta: str) -> None:
    warnings.simplefilter("ignore")
    val_files = yaml.safe_load(open("configs/corpus-study.yaml"))["data"]["val_files"]
    runs: dict[str, list[float]] = {"store": [], "fasta": []}
    for _ in range(3):
        for name, source in (("store", store), ("fasta", fasta)):
            runs[name].append(batches_per_s(source, val_files))
            print(f"{name}: {runs[name][-1]:.1f} batches/s", file=sys.stderr, flush=True)
    print(json.dumps({name: {"median": round(statistics.median(v), 1), "runs": [round(x, 1) for x in v]}
                      for name, v in runs.items()}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
