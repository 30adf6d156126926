"""Condense one training run's CSVLogger output into a small JSON summary.

A run's ``metrics.csv`` holds every logged step (per-expert loads, learning rates, ...) and is
mostly noise for a report; what a result in ``docs/`` rests on is the validation curve, the final
and best held-out numbers, the step count, the throughput and how the run was started. This keeps
exactly that, so ``results/`` stays small and the figures can be redrawn from it
(``scripts/make_quality_figures.py``).

    python scripts/summarize_run.py runs/ecoli-quality --out results/quality/run-summaries/ecoli-quality.json \
        --command "python cli.py fit --config configs/ecoli-quality.yaml" --hardware "1x NVIDIA H200" \
        [--log fit.log] [--wall-clock-s 172] [--note "..."]

``RUN`` is a folder with ``version_*/metrics.csv`` (the newest version is read) or a metrics.csv.
``--log`` reads the process wall-clock from a line ``wall-clock (process) N s`` when present.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import sys
from pathlib import Path

from biomoe.files import write_text

VALIDATION_PREFIX = "val/"
TRAIN_TAIL_STEPS = 100  # train bits/base are averaged over the last this many steps (dropout/noise on)


def newest_metrics(run: Path) -> Path:
    """``run`` itself when it is a file, else its newest ``version_N/metrics.csv`` by number."""
    if run.is_file():
        return run
    candidates = sorted(run.glob("version_*/metrics.csv"), key=lambda p: int(p.parent.name.split("_")[1]))
    if not candidates and (run / "metrics.csv").is_file():
        return run / "metrics.csv"
    if not candidates:
        raise FileNotFoundError(f"{run}: no metrics.csv")
    return candidates[-1]


def summarize(metrics_csv: Path) -> dict:
    """Validation curves (bits-per-base columns only), last/best held-out point, steps, median
    tokens/s and the mean train bits/base over the last ``TRAIN_TAIL_STEPS`` steps.

    Steps are counted as optimizer steps completed (Lightning logs ``global_step - 1``)."""
    rows = list(csv.DictReader(metrics_csv.open()))
    val_columns = sorted({k for r in rows for k, v in r.items()
                          if k.startswith(VALIDATION_PREFIX) and k.endswith("bits_per_base") and v})
    validation: dict[str, list] = {"step": []}
    for column in val_columns:
        validation[column] = []
    for r in rows:
        if r.get("val/bits_per_base"):
            validation["step"].append(int(r["step"]) + 1)
            for column in val_columns:
                validation[column].append(round(float(r[column]), 6) if r.get(column) else None)
    train = [(int(r["step"]) + 1, float(r["train/bits_per_base"])) for r in rows if r.get("train/bits_per_base")]
    tokens = [float(r["train/tokens_per_s"]) for r in rows if r.get("train/tokens_per_s")]
    steps = max([s for s, _ in train] + validation["step"] + [0])
    tail = [b for s, b in train if s > steps - TRAIN_TAIL_STEPS]
    summary: dict = {"steps": steps}
    if tokens:
        summary["median_tokens_per_s"] = round(statistics.median(tokens))
    if tail:
        summary["train_bits_per_base_last_100_steps"] = round(statistics.mean(tail), 4)
    if validation["step"]:
        held_out = validation["val/bits_per_base"]
        best = min(range(len(held_out)), key=held_out.__getitem__)
        summary["last"] = {column: values[-1] for column, values in validation.items()}
        summary["best"] = {"step": validation["step"][best], "val/bits_per_base": held_out[best]}
    summary["validation"] = validation
    return summary


def wall_clock_from_log(log: Path) -> int | None:
    found = re.findall(r"wall-clock \(process\) (\d+) s", log.read_text(errors="replace"))
    return int(found[-1]) if found else None


def to_json(summary: dict) -> str:
    """Indented JSON with each list of numbers on one line (a curve stays one readable row)."""
    text = json.dumps(summary, indent=1)
    return re.sub(r"\[([^\[\]{}\"]*)\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/summarize_run.py", description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a CSVLogger run folder or a metrics.csv")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--command", required=True, help="the command that produced the run")
    parser.add_argument("--hardware", default="", help='e.g. "1x NVIDIA H200"')
    parser.add_argument("--software", default="", help='e.g. "torch 2.11.0+cu130, Transformer Engine 2.20.2"')
    parser.add_argument("--date", default="", help="when it was measured (YYYY-MM-DD)")
    parser.add_argument("--log", type=Path, default=None, help="the run's console log (for its wall-clock)")
    parser.add_argument("--wall-clock-s", type=int, default=None, help="process wall-clock, when no log has it")
    parser.add_argument("--note", default="")
    args = parser.parse_args(argv)
    try:
        metrics = newest_metrics(args.run)
        body = summarize(metrics)
        wall = args.wall_clock_s if args.wall_clock_s is not None else (
            wall_clock_from_log(args.log) if args.log else None)
    except (OSError, ValueError, KeyError) as err:
        print(f"summarize_run: error: {args.run}: {err}", file=sys.stderr)
        return 2
    if args.out.resolve() == metrics.resolve():
        print(f"summarize_run: error: {args.out}: would overwrite its input", file=sys.stderr)
        return 2
    head = {"name": args.out.stem, "command": args.command}
    for key in ("hardware", "software", "date", "note"):
        if getattr(args, key):
            head[key] = getattr(args, key)
    if wall is not None:
        head["wall_clock_s"] = wall
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, to_json({**head, **body}))
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
