"""The end-of-``fit`` summary: where the checkpoints went and their size, the training-curve plot,
and held-out bits/base next to the Markov baseline.

It reads the numbers from :class:`~biomoe.training.reports.history.MetricsHistory` (what every logger was
sent), not from one logger's files, so it looks the same with CSV, TensorBoard or any other logger.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint

from biomoe.training.guards.best_checkpoint import BestCheckpoint
from biomoe.training.guards.time_limit import StopAtTimeLimit
from biomoe.training.reports.history import MetricsHistory, RunRecord, find_history
from biomoe.training.reports.markov_baseline import MarkovBaseline
from biomoe.training.reports.plots import plot_training_curves

__all__ = ["fit_summary", "format_size", "size_on_disk"]

MONITOR = "val/bits_per_base"


def size_on_disk(path: str | os.PathLike[str]) -> int:
    """Bytes of a checkpoint file, or of every file in a distributed checkpoint's folder; 0 if gone."""
    path = Path(path)
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.is_file() else 0


def format_size(size: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def _checkpoint_lines(trainer: Any) -> list[str]:
    """One line per checkpoint with its size. ``last.ckpt`` is full (weights, the EMA average,
    optimizer and loop state), which a resume needs; a recipe's best checkpoint
    (:class:`~biomoe.training.guards.best_checkpoint.BestCheckpoint`) keeps all but the optimizer state, so
    it still holds the averaged weights validation scored. A 100M-parameter run still writes
    gigabytes, and the summary says how many."""
    lines: list[str] = []
    seen: set[str] = set()
    for callback in trainer.checkpoint_callbacks:
        if not isinstance(callback, ModelCheckpoint):
            continue
        best = callback.best_model_path
        if best and best not in seen:
            seen.add(best)
            score = callback.best_model_score
            note = f"best {callback.monitor} {float(score):.4f}; " if callback.monitor and score is not None else ""
            trimmed = "; no optimizer state" if isinstance(callback, BestCheckpoint) else ""
            lines.append(f"checkpoint: {best} ({note}{format_size(size_on_disk(best))}{trimmed})")
        last = getattr(callback, "last_model_path", "")
        if last and last not in seen:
            seen.add(last)
            lines.append(f"checkpoint: {last} ({format_size(size_on_disk(last))})")
    if len(seen) > 1:
        total = format_size(sum(size_on_disk(path) for path in seen))
        lines.append(f"            {total} in all")
    return lines


def _markov_order(trainer: Any) -> int | None:
    return next((cb.order for cb in trainer.callbacks if isinstance(cb, MarkovBaseline)), None)


def _held_out_line(trainer: Any, history: MetricsHistory | None) -> str | None:
    last = history.series.get(MONITOR) if history is not None else None
    if not last:
        value = trainer.callback_metrics.get(MONITOR)
        return None if value is None else f"validation bits/base: {float(value):.4f}"
    # Lightning logs a validation run after k optimizer steps at step k - 1 (the last batch's index).
    best_step, best = min(last, key=lambda point: point[1])
    last_step, final = last[-1]
    text = f"validation bits/base: best {best:.4f} (after {best_step + 1:,} steps)"
    if last_step != best_step:
        text += f", last {final:.4f} (after {last_step + 1:,} steps)"
    markov = history.last("val/markov_bits_per_base")
    if markov is not None:
        order = _markov_order(trainer)
        name = f"order-{order} Markov baseline" if order is not None else "Markov baseline"
        gap = markov - best
        text += f"; {name} {markov:.4f} (best is {abs(gap):.4f} {'below' if gap >= 0 else 'above'} it)"
    return text


def _stopped_by_time(trainer: Any) -> bool:
    return any(isinstance(cb, StopAtTimeLimit) and cb.stopped_at_step is not None for cb in trainer.callbacks)


def _behind_markov_line(trainer: Any, history: MetricsHistory | None) -> str | None:
    """A run whose best validation is still above the Markov baseline says so in words, and why
    when ``max_time`` ended it: the numbers alone read like a finished model."""
    points = history.series.get(MONITOR) if history is not None else None
    markov = history.last("val/markov_bits_per_base") if history is not None else None
    if not points or markov is None:
        return None
    best = min(value for _, value in points)
    if best <= markov:
        return None
    order = _markov_order(trainer)
    name = f"order-{order} Markov baseline" if order is not None else "Markov baseline"
    line = (f"behind:     the network is still behind the {name}: its best validation ({best:.4f} bits/base) is "
            f"{best - markov:.4f} above the baseline's {markov:.4f}")
    if _stopped_by_time(trainer):
        line += ("; trainer.max_time stopped it: more time, or a smaller network that takes more steps in it "
                 "(configs/genome-cpu.yaml on a CPU), lets it catch up")
    return line


def _per_genome_line(history: MetricsHistory | None) -> str | None:
    if history is None:
        return None
    values = {key.split("/")[1]: points[-1][1] for key, points in history.series.items()
              if key.startswith("val/") and key.endswith("/bits_per_base") and key.count("/") == 2 and points}
    if not values:
        return None
    return "per genome (last validation): " + " | ".join(f"{label} {value:.4f}" for label, value in values.items())


def _plot(trainer: Any, history: MetricsHistory | None, log_dir: Path) -> Path | None:
    if history is not None and history.series:
        return plot_training_curves(history.series, log_dir / "training_curves.png")
    metrics = log_dir / "metrics.csv"
    return plot_training_curves(metrics) if metrics.exists() else None


def fit_summary(trainer: Any, log_dir: str | None = None) -> str:
    """The lines printed when ``fit`` ends (rank zero). Pass ``trainer.log_dir`` read on every rank:
    under several processes reading it is a collective."""
    history = find_history(trainer)
    log_dir = Path(log_dir or trainer.default_root_dir)
    lines = ["", "=== biomoe fit finished ==="]
    record = next((cb for cb in trainer.callbacks if isinstance(cb, RunRecord)), None)
    if record is not None and record.resumed_from:
        lines.append(f"resumed:    {record.resumed_from} at step {record.resumed_at_step:,} (the plot and "
                     "figures below cover the whole run)")
    lines += _checkpoint_lines(trainer)
    metrics = log_dir / "metrics.csv"
    if metrics.exists():
        lines.append(f"metrics:    {metrics}")
    elif trainer.loggers:
        lines.append(f"logs:       {log_dir}")
    png = _plot(trainer, history, log_dir)
    if png is not None:
        lines.append(f"plot:       {png}")
    for line in (_held_out_line(trainer, history), _behind_markov_line(trainer, history), _per_genome_line(history)):
        if line is not None:
            lines.append(line)
    return "\n".join(lines)
