"""What the CLI sets up around every Trainer: loggers' packages, quiet start-up, matmul precision,
the progress bar, and biomoe's own callbacks and metric history.

Each function does one thing and is safe to call on a Trainer built elsewhere; the CLI calls them
in :meth:`~biomoe.cli.lightning_cli.BioMoECLI.instantiate_classes` and ``instantiate_trainer``.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterable
from typing import Any

import torch
from lightning.pytorch.callbacks import RichProgressBar

from biomoe.compat.lightning import attached_trainer
from biomoe.errors import ConfigError
from biomoe.training.genome_metrics import PerGenomeMetrics

__all__ = ["StepProgressBar", "check_logger_packages", "install_per_genome_metrics", "install_progress_bar",
           "quiet_lightning_tips", "set_matmul_precision"]

# Logger class -> (packages any one of which it needs, the biomoe extra that installs one).
LOGGER_PACKAGES: dict[str, tuple[tuple[str, ...], str]] = {
    "TensorBoardLogger": (("tensorboard", "tensorboardX"), "tensorboard"),
}


def _logger_classes(logger: Any) -> list[str]:
    """Class names named by a ``trainer.logger`` config value (one, a list, or a bool)."""
    items = logger if isinstance(logger, (list, tuple)) else [logger]
    names = []
    for item in items:
        if hasattr(item, "get") and item.get("class_path"):
            names.append(str(item.get("class_path")).rsplit(".", 1)[-1])
        elif isinstance(item, str):
            names.append(item.rsplit(".", 1)[-1])
        elif item is not None and not isinstance(item, bool):
            names.append(type(item).__name__)
    return names


def package_installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def check_logger_packages(logger: Any) -> None:
    """A logger whose package is missing is one line naming the extra to install, before Lightning
    fails on it with a long traceback from inside the logger's constructor."""
    for name in _logger_classes(logger):
        needs = LOGGER_PACKAGES.get(name)
        if needs is None:
            continue
        packages, extra = needs
        if not any(package_installed(package) for package in packages):
            raise ConfigError(f"trainer.logger: {name} needs the {packages[0]} package, which is not installed; "
                              f"pip install 'biomoe[{extra}]'")


class _DropMessages(logging.Filter):
    def __init__(self, fragments: Iterable[str]) -> None:
        super().__init__()
        self.fragments = tuple(fragments)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(fragment in message for fragment in self.fragments)


_TIPS = _DropMessages(["try installing [litlogger]"])


def quiet_lightning_tips() -> None:
    """Drop Lightning's advertisement for its cloud logger, printed on every run (a logging filter on
    Lightning's rank-zero logger; its other messages are untouched)."""
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if _TIPS not in logger.filters:
        logger.addFilter(_TIPS)


def set_matmul_precision(accelerator: Any = None) -> str | None:
    """Let fp32 matrix products use TF32 tensor cores on GPUs that have them (Ampere and later).

    Lightning prints a hint on every such run until this is set. ``high`` keeps fp32 storage and
    accumulation with TF32 inputs, which is what LLM trainers set (nanoGPT, litgpt); it changes
    nothing in bf16 autocast regions. An explicit choice by the user (anything but the default
    ``highest``) is kept. Returns the setting made, or None.
    """
    if str(accelerator or "auto").lower() == "cpu" or not torch.cuda.is_available():
        return None
    if torch.get_float32_matmul_precision() != "highest":
        return None
    if torch.cuda.get_device_capability()[0] < 8:
        return None
    torch.set_float32_matmul_precision("high")
    return "high"


class StepProgressBar(RichProgressBar):
    """Lightning's rich bar, without the epoch total when the run is step-based.

    With ``max_steps`` set and ``max_epochs`` left at -1 the stock bar reads ``Epoch 0/-2``; a
    step-based run has no epoch total, so only the epoch number is shown.
    """

    def _get_train_description(self, current_epoch: int) -> str:
        trainer = attached_trainer(self)
        if trainer is not None and trainer.max_epochs is not None and trainer.max_epochs < 0:
            description = f"Epoch {current_epoch}"
            if len(self.validation_description) > len(description):
                description = f"{description:{len(self.validation_description)}}"
            return description
        return super()._get_train_description(current_epoch)


def install_progress_bar(trainer: Any, configured: Iterable[Any]) -> None:
    """Swap Lightning's default rich bar (one it added itself, not one from ``configured``, the
    user's callbacks) for :class:`StepProgressBar`."""
    chosen = {id(cb) for cb in configured}
    for index, callback in enumerate(trainer.callbacks):
        if type(callback) is RichProgressBar and id(callback) not in chosen:
            trainer.callbacks[index] = StepProgressBar()


def install_per_genome_metrics(trainer: Any) -> None:
    """Per-genome held-out bits/base (:class:`~biomoe.training.genome_metrics.PerGenomeMetrics`)
    unless the config has the callback already; it logs nothing for one genome."""
    if not any(isinstance(cb, PerGenomeMetrics) for cb in trainer.callbacks):
        trainer.callbacks.append(PerGenomeMetrics())
