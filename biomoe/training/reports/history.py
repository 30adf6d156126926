"""The scalars a run logged, kept by biomoe itself whatever logger the user chose.

The end-of-run plot and summary need the training curve. Reading it back from ``metrics.csv``
ties them to the CSV logger: with TensorBoard, Weights & Biases or MLflow they silently vanished.
:class:`MetricsHistory` is a :class:`~lightning.pytorch.loggers.Logger` that Lightning feeds with
the same ``log_metrics`` calls as the user's loggers (it is added after them, so the user's logger
still decides where checkpoints and ``config.yaml`` go) and keeps the series in memory.

A run resumed from a checkpoint is still one run: :class:`RunRecord` stores the curves the plot and
summary read in every checkpoint and puts them back on resume, so the plot, the held-out line and
the summary cover the whole run, not only the steps since the restart. It also records how the run
computes (``trainer.precision``), which ``--ckpt_path last`` compares before resuming.
"""

from __future__ import annotations

from argparse import Namespace
from collections import defaultdict
from typing import Any

import lightning as L
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities import rank_zero_only

__all__ = ["KEPT_SERIES", "MetricsHistory", "RunRecord", "find_history", "install_metrics_history",
           "install_run_record", "kept_series", "recorded_precision"]


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


KEPT_SERIES = ("train/bits_per_base", "train/tokens_per_s", "val/bits_per_base", "val/markov_bits_per_base")
"""The curves a checkpoint carries (with the per-genome ``val/<label>/bits_per_base``): what the
plot and the summary read. Expert loads and the like stay in the logger's files."""


def kept_series(series: dict[str, list[tuple[int, float]]]) -> dict[str, list[list[float]]]:
    """The curves worth carrying across a resume, as plain lists (checkpoints load weights-only)."""
    def kept(key: str) -> bool:
        return key in KEPT_SERIES or (key.startswith("val/") and key.endswith("/bits_per_base") and key.count("/") == 2)
    return {key: [[int(step), float(value)] for step, value in points] for key, points in series.items() if kept(key)}


class RunRecord(L.Callback):
    """What makes a resumed run one run: its curves so far and how it computes, in every checkpoint.

    ``state_dict`` is Lightning's callback state (saved with each checkpoint): ``trainer_precision``
    and the curves of :data:`KEPT_SERIES`. On resume they are put back in front of the new points
    of the run's :class:`MetricsHistory`; ``resumed_from`` and ``resumed_at_step`` say where from."""

    def __init__(self) -> None:
        self.trainer_precision: str | None = None
        self.started = False
        self.resumed_from: str | None = None
        self.resumed_at_step: int | None = None
        self._history: MetricsHistory | None = None
        self._restored: dict[str, list[tuple[int, float]]] = {}

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.trainer_precision = str(trainer.precision)
        self._history = find_history(trainer)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.started = True
        ckpt = trainer.ckpt_path
        if isinstance(ckpt, str) and ckpt:
            self.resumed_from, self.resumed_at_step = ckpt, trainer.global_step
        if self._history is not None and self._restored:
            for key, points in self._restored.items():  # the run so far, then what this start adds
                self._history.series[key] = [*points, *self._history.series.get(key, [])]
            self._restored = {}

    def state_dict(self) -> dict[str, Any]:
        series = self._history.series if self._history is not None else self._restored
        return {"trainer_precision": self.trainer_precision, "series": kept_series(series)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restored = {key: [(int(step), float(value)) for step, value in points]
                          for key, points in (state_dict.get("series") or {}).items()}


def install_run_record(trainer: Any) -> RunRecord:
    """Add a :class:`RunRecord` to the trainer's callbacks (once)."""
    existing = next((cb for cb in trainer.callbacks if isinstance(cb, RunRecord)), None)
    if existing is None:
        existing = RunRecord()
        trainer.callbacks.append(existing)
    return existing


def recorded_precision(checkpoint: dict[str, Any] | None) -> str | None:
    """``trainer.precision`` as a :class:`RunRecord` stored it in a checkpoint (None before it did)."""
    callbacks = (checkpoint or {}).get("callbacks") or {}
    state = callbacks.get(RunRecord.__qualname__)
    value = state.get("trainer_precision") if isinstance(state, dict) else None
    return None if value is None else str(value)
