"""The scalars a run logged, kept by biomoe itself whatever logger the user chose.

The end-of-run plot and summary need the training curve. Reading it back from ``metrics.csv``
ties them to the CSV logger: with TensorBoard, Weights & Biases or MLflow they silently vanished.
:class:`MetricsHistory` is a :class:`~lightning.pytorch.loggers.Logger` that Lightning feeds with
the same ``log_metrics`` calls as the user's loggers (it is added after them, so the user's logger
still decides where checkpoints and ``config.yaml`` go) and keeps the series in memory.
"""

from __future__ import annotations

from argparse import Namespace
from collections import defaultdict
from typing import Any

from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities import rank_zero_only

__all__ = ["MetricsHistory", "find_history", "install_metrics_history"]


class MetricsHistory(Logger):
    """``series[name] = [(step, value), ...]`` for every scalar logged (rank zero only)."""

    def __init__(self) -> None:
        super().__init__()
        self.series: dict[str, list[tuple[int, float]]] = defaultdict(list)

    @property
    def name(self) -> str:
        return "biomoe-history"

    @property
    def version(self) -> str:
        return ""

    @property
    def save_dir(self) -> str | None:
        return None  # writes nothing

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        for key, value in metrics.items():
            if key == "epoch":
                continue
            try:
                self.series[key].append((int(step or 0), float(value)))
            except (TypeError, ValueError):
                continue  # not a scalar

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        pass

    def last(self, key: str) -> float | None:
        points = self.series.get(key)
        return points[-1][1] if points else None

    def best(self, key: str) -> tuple[int, float] | None:
        """(step, value) of the lowest value of ``key``."""
        points = self.series.get(key)
        return min(points, key=lambda point: point[1]) if points else None


def find_history(trainer: Any) -> MetricsHistory | None:
    return next((lg for lg in getattr(trainer, "loggers", []) if isinstance(lg, MetricsHistory)), None)


def install_metrics_history(trainer: Any) -> MetricsHistory | None:
    """Append a :class:`MetricsHistory` to the trainer's loggers (once). Without any logger
    (``trainer.logger: false``) nothing is logged at all, so none is added: adding one would make it
    the logger that decides where checkpoints go."""
    existing = find_history(trainer)
    if existing is not None or not trainer.loggers:
        return existing
    history = MetricsHistory()
    trainer.loggers = [*trainer.loggers, history]
    return history
