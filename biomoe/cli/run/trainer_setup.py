"""What the CLI sets up around every Trainer: loggers' packages, quiet start-up, matmul precision,
the progress bar, and biomoe's own callbacks and metric history.

Each function does one thing and is safe to call on a Trainer built elsewhere; the CLI calls them
in :meth:`~biomoe.cli.lightning_cli.BioMoECLI.instantiate_classes` and ``instantiate_trainer``.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import warnings
from collections.abc import Iterable
from typing import Any

import torch
from lightning.pytorch.callbacks import RichModelSummary, RichProgressBar

from biomoe.cli.run.config_values import class_name, entries, get
from biomoe.compat.lightning import attached_trainer
from biomoe.errors import ConfigError
from biomoe.training.reports.genome_metrics import PerGenomeMetrics

__all__ = ["ParameterSummary", "StepProgressBar", "available_accelerators", "cap_loader_workers", "check_accelerator",
           "check_logger_packages", "choose_cpu_precision", "install_model_summary", "install_per_genome_metrics",
           "install_progress_bar", "quiet_lightning_tips", "runs_on_cpu", "set_matmul_precision",
           "usable_cores"]

# Logger class -> (packages any one of which it needs, the biomoe extra that installs one).
LOGGER_PACKAGES: dict[str, tuple[tuple[str, ...], str]] = {
    "TensorBoardLogger": (("tensorboard", "tensorboardX"), "tensorboard"),
}


def package_installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def check_logger_packages(logger: Any) -> None:
    """A logger whose package is missing is one line naming the extra to install, before Lightning
    fails on it with a long traceback from inside the logger's constructor. ``logger`` is the
    ``trainer.logger`` setting: one logger, a list, or ``true``/``false``."""
    for name in filter(None, map(class_name, entries(logger))):
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


_TIPS = _DropMessages(["try installing [litlogger]", "try installing [litmodels]", "100% of the batches"])

SCORING_NOISE = (
    # validate/test/predict seed nothing that changes their figures
    "No seed found",
    # a checkpoint from fit records its callbacks' state (checkpointing, guards): restoring them is
    # a concern of resuming training, not of scoring the weights
    r"Be aware that when using `ckpt_path`, callbacks used to create the checkpoint need to be provided",
)
"""Start of Lightning's warnings that validate/test/predict never show."""


def quiet_lightning_tips(scoring: bool = False) -> None:
    """Drop Lightning's advertisements for its cloud logger and model registry and its note that a
    ``limit_*_batches`` of 1.0 uses every batch (what 1.0 says), printed on every run (a logging
    filter on Lightning's rank-zero logger; its other messages are untouched); for the commands
    that only score a checkpoint (``scoring``), also :data:`SCORING_NOISE`."""
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if _TIPS not in logger.filters:
        logger.addFilter(_TIPS)
    if scoring:
        for message in SCORING_NOISE:
            warnings.filterwarnings("ignore", message=message)


def available_accelerators() -> list[str]:
    """The ``trainer.accelerator`` values this machine can run (``auto`` picks the first)."""
    found = []
    if torch.cuda.is_available():
        found.append("gpu (cuda)")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return [*found, "cpu"]


def check_accelerator(accelerator: Any) -> None:
    """``trainer.accelerator gpu`` on a machine without one ended in Lightning's "trainer: No supported
    gpu backend found!": one line naming the key and what this machine has instead."""
    name = str(accelerator or "auto").lower()
    missing = (name in ("gpu", "cuda") and not torch.cuda.is_available()) or (
        name == "mps" and "mps" not in available_accelerators())
    if missing:
        raise ConfigError(f"trainer.accelerator: {name!r} is not available on this machine; it has: "
                          f"{', '.join(available_accelerators())} (or use auto)")


GPU_PRECISIONS = frozenset({"bf16-mixed", "bf16-true", "bf16", "16-mixed", "16-true", "16"})
"""``trainer.precision`` values that are fast only where hardware computes in 16 bits (GPUs): a CPU
emulates them, so a recipe's bf16-mixed step runs many times slower there than in 32-true."""

CPU_PRECISION = "32-true"


def runs_on_cpu(accelerator: Any) -> bool:
    """Whether ``trainer.accelerator`` puts the run on the CPU (``cpu``, or ``auto`` on a machine
    with neither a GPU nor MPS)."""
    name = str(accelerator or "auto").lower()
    return name == "cpu" or (name == "auto" and available_accelerators() == ["cpu"])


def choose_cpu_precision(section: Any, given: set[str]) -> str | None:
    """The recipes run unchanged on a CPU, and their GPU precision (bf16-mixed) made every step there
    many times slower than fp32. A run on the CPU whose config gives a 16-bit precision runs in
    32-true instead; one given as ``--trainer.precision`` on the command line (``given``: the
    options there) is the user's choice and stays. ``section`` is one subcommand's parsed config,
    changed in place. Returns the one line to print, or None when there is nothing to say."""
    trainer = get(section, "trainer")
    precision = get(trainer, "precision")
    if precision is None or str(precision) not in GPU_PRECISIONS or not runs_on_cpu(get(trainer, "accelerator")):
        return None
    if "trainer.precision" in given:
        return (f"biomoe: note: trainer.precision {precision} on a CPU, as given: it runs many times slower there "
                f"than {CPU_PRECISION}")
    trainer["precision"] = CPU_PRECISION
    return (f"biomoe: note: running in {CPU_PRECISION} on this CPU: the config's trainer.precision {precision} is "
            f"for GPUs and runs many times slower here (--trainer.precision {precision} keeps it)")


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the system has one: a
    container or ``taskset`` allows fewer than the machine has)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


def cap_loader_workers(section: Any, given: set[str]) -> int | None:
    """A config's ``data.num_workers`` above the cores this process may use is lowered to that
    many: a GPU recipe's 8 loader processes on a 2-core laptop only compete with training for the
    cores (and torch warned twice). A value given as ``--data.num_workers`` on the command line is
    the user's choice and stays. ``section`` is one subcommand's parsed config, changed in place;
    returns the value set, or None when nothing changed."""
    data = get(section, "data")
    workers = get(data, "num_workers")
    cores = usable_cores()
    if not isinstance(workers, int) or workers <= cores or "data.num_workers" in given:
        return None
    data["num_workers"] = cores
    return cores


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
    """Lightning's rich bar, without the epoch total when the run is step-based, and with the
    right total after a resume.

    With ``max_steps`` set and ``max_epochs`` left at -1 the stock bar reads ``Epoch 0/-2``; a
    step-based run has no epoch total, so only the epoch number is shown. The stock total of a
    step-based epoch is the steps still to run, while the bar counts the epoch's batches from its
    start: a run resumed at batch 100 of 110 read ``110/9``. The batches the epoch had already run
    count towards its total here.
    """

    @property
    def total_train_batches(self) -> int | float:
        total = super().total_train_batches
        trainer = attached_trainer(self)
        if trainer is None or not (trainer.max_epochs == -1 and trainer.max_steps and trainer.max_steps > 0):
            return total
        done = trainer.fit_loop.epoch_loop.batch_progress.current.ready  # restored on resume
        return min(trainer.num_training_batches, total + done)

    def get_metrics(self, trainer: Any, pl_module: Any) -> dict[str, Any]:
        """Short items that fit beside the bar in an 80-column terminal: the stock ``v_num`` and
        ``train/tokens_per_s: 1332.971`` wrapped the metrics column over four lines, leaving
        columns behind at every refresh. The version is in the run folder printed at the end, the
        validation loss shows once (bits/base; ``val/ce`` is the same in nats); throughput reads
        ``tok/s: 1,333`` and other floats keep four significant digits."""
        items = dict(super().get_metrics(trainer, pl_module))
        items.pop("v_num", None)
        items.pop("val/ce", None)  # the same number as val/bits_per_base, in nats
        if "val/bits_per_base" in items:
            items["val bits/base"] = items.pop("val/bits_per_base")
        rate = items.pop("train/tokens_per_s", None)
        if isinstance(rate, (int, float)):
            items["tok/s"] = f"{rate:,.0f}"
        return {name: (f"{value:.4g}" if isinstance(value, float) else value) for name, value in items.items()}

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
    """Per-genome held-out bits/base (:class:`~biomoe.training.reports.genome_metrics.PerGenomeMetrics`)
    unless the config has the callback already; it logs nothing for one genome."""
    if not any(isinstance(cb, PerGenomeMetrics) for cb in trainer.callbacks):
        trainer.callbacks.append(PerGenomeMetrics())


class ParameterSummary(RichModelSummary):
    """Lightning's model summary without its FLOPs: they are counted only for a model with an
    ``example_input_array``, which biomoe's has not, so the column read 0 on every row and the
    table ended with "Total FLOPs: 0"."""

    @staticmethod
    def summarize(summary_data: list[tuple[str, list[str]]], total_parameters: int, trainable_parameters: int,
                  model_size: float, total_training_modes: dict[str, int], total_flops: int = 0,
                  **summarize_kwargs: Any) -> None:
        from rich.console import Console
        from rich.table import Table
        from lightning.pytorch.utilities.model_summary import get_formatted_model_size, get_human_readable_count

        columns = [(name, values) for name, values in summary_data if name != "FLOPs" or total_flops]
        table = Table(header_style="bold magenta")
        for name, _ in columns:
            table.add_column(name, justify="right" if name in ("Params", "FLOPs") else "left")
        for row in zip(*(values for _, values in columns)):
            table.add_row(*row)
        console = Console()
        console.print(table)
        trainable = get_human_readable_count(int(trainable_parameters))
        total = get_human_readable_count(int(total_parameters))
        console.print(f"params: {trainable} trainable, {total} in all ({get_formatted_model_size(model_size)} MB); "
                      f"modules: {total_training_modes.get('train', 0)} in train mode, "
                      f"{total_training_modes.get('eval', 0)} in eval mode"
                      + (f"; FLOPs: {get_human_readable_count(total_flops)}" if total_flops else ""))


def install_model_summary(trainer: Any, configured: Iterable[Any]) -> None:
    """Swap the rich model summary Lightning added itself (not one of ``configured``) for
    :class:`ParameterSummary` (a trainer with ``enable_model_summary: false`` has none)."""
    chosen = {id(cb) for cb in configured}
    for index, callback in enumerate(trainer.callbacks):
        if type(callback) is RichModelSummary and id(callback) not in chosen:  # rich is installed
            trainer.callbacks[index] = ParameterSummary()
