"""One check of every value a user sets, before anything is built.

jsonargparse already checks *types* (``--model.config.top_k two`` is refused while parsing). What
it cannot know are *ranges*: a negative learning rate, ``betas`` above 1, ``max_steps -5``,
``devices 0`` or a negative ``init_std`` parse fine and then fail deep inside torch or Lightning
with a traceback, or, worse, are accepted and train something meaningless (a negative weight
decay, a negative warm-up). :func:`validate_config` walks the parsed configuration of
``fit``/``validate``/``test``/``predict`` against :data:`RULES` and :data:`CLASS_RULES` (the init
args of callbacks, loggers and strategies, by class) and raises one
:class:`~biomoe.model.config.ConfigError` ``<key>: <problem>`` for the first value out of range.

The ranges of ``model.config``, ``model.optim``, ``model.runtime`` and ``data`` are declared on
their dataclasses (:class:`~biomoe.model.config.ModelConfig`, :class:`~biomoe.data.config.DataConfig`,
...), which check them whenever they are built; :data:`RULES` runs those same checks on the parsed
values, so that the first bad value of any section is reported before anything is built. What is
written here is what no dataclass holds: Lightning's ``trainer.*`` arguments, the seed, the
backend names, and the command line's own refusals (a learning rate of 0, ``max_steps 0``).

:func:`check_config_files` does the same for the ``--config`` files themselves before
jsonargparse reads them: a binary file, a YAML syntax error or a YAML list is one line naming the
file (and line), not a ``UnicodeDecodeError`` or a message without a file name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

import yaml
from lightning.pytorch.accelerators import AcceleratorRegistry
from lightning.pytorch.strategies import StrategyRegistry

from biomoe.backends import expert_backend_choices
from biomoe.checks import (Check, boolean, choice, either, field_checks, folder, integer, is_number, key_error, real,
                           text)
from biomoe.cli.run.config_values import MISSING, class_entries, lookup, plain
from biomoe.data.config import DataConfig
from biomoe.errors import GenomeInputError
from biomoe.user_text import decode_user_text
from biomoe.model.config import (BACKEND_CHOICES, LAYER_BACKEND_FIELDS, ModelConfig, OptimConfig,
                                 RuntimeConfig)

__all__ = ["RULES", "CLASS_RULES", "FREE_FORM", "validate_config", "check_config_files", "config_file_args"]


# ---------------------------------------------------------------------------------------------
# Checks of what no dataclass holds (the vocabulary is biomoe.model.config's)
# ---------------------------------------------------------------------------------------------
_DURATION = re.compile(r"^\d+:\d{1,2}:\d{1,2}:\d{1,2}$")


def _duration(value: Any) -> str | None:
    """Lightning's ``max_time``/time-based ``val_check_interval``: ``DD:HH:MM:SS`` or a dict."""
    if value is None or isinstance(value, Mapping) or hasattr(value, "total_seconds"):
        return None
    if isinstance(value, str) and _DURATION.match(value.strip()):
        return None
    return f"must be a duration DD:HH:MM:SS (e.g. 00:01:30:00), got {value!r}"


def _devices(value: Any) -> str | None:
    """``auto``, a count >= 1, -1 (all), a list of device indices, or such a list as text."""
    if value == "auto" or value == -1 or value == "-1":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return None if value >= 1 else f"must be >= 1, -1 (all) or auto, got {value}"
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",") if p.strip()]
        if not parts or not all(p.isdigit() for p in parts):
            return f"must be auto, a count, -1 or device indices like 0,1; got {value!r}"
        if len(parts) == 1 and "," not in value and int(parts[0]) < 1:
            return f"must be >= 1, -1 (all) or auto, got {value!r}"
        return None
    if isinstance(value, Sequence) and value and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                                     for v in value):
        return None
    return f"must be auto, a count >= 1, -1 or a non-empty list of device indices, got {value!r}"


def _accelerator(value: Any) -> str | None:
    if not isinstance(value, str):
        return None  # an Accelerator instance or class_path: Lightning checks it
    names = ["auto", "gpu", *AcceleratorRegistry.available_accelerators()]
    return None if value.lower() in names else f"{value!r} is not one of {', '.join(dict.fromkeys(names))}"


def _strategy(value: Any) -> str | None:
    if not isinstance(value, str):
        return None  # class_path form: resolved (and type-checked) by jsonargparse
    names = ["auto", *StrategyRegistry.available_strategies()]
    if value.lower() in names:
        return None
    if "." in value:
        return (f"{value!r} is neither a strategy name nor an importable Strategy class "
                "(e.g. biomoe.parallel.strategy.ExpertParallelStrategy)")
    return f"{value!r} is not a strategy name; choose one of {', '.join(names[:12])}, ..."


def _batches(value: Any) -> str | None:
    """``limit_*_batches``: a count >= 0 or a fraction in [0, 1]."""
    if value is None:
        return None
    if isinstance(value, bool) or not is_number(value):
        return f"must be a count or a fraction, got {value!r}"
    if isinstance(value, int):
        return None if value >= 0 else f"must be >= 0 batches, got {value}"
    if value > 1.0 and float(value).is_integer():
        return None  # a count parsed as float (some jsonargparse versions do); Lightning reads it as one
    return (None if 0.0 <= value <= 1.0
            else f"a fraction must be in [0, 1] (or a whole number of batches), got {value:g}")


def _val_check_interval(value: Any) -> str | None:
    if value is None or isinstance(value, (Mapping, str)) or hasattr(value, "total_seconds"):
        return _duration(value) if isinstance(value, str) else None
    if isinstance(value, bool) or not is_number(value):
        return f"must be a step count, a fraction of an epoch or a duration, got {value!r}"
    if isinstance(value, int):
        return None if value >= 1 else f"a step count must be >= 1, got {value}"
    return None if 0.0 < value <= 1.0 else f"a fraction of an epoch must be in (0, 1], got {value:g}"


def _seed(value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    return integer(0, 2**32 - 1)(value)


def _expert_backend(value: Any) -> str | None:
    """A name in the expert-backend registry (biomoe's own backends registered), or ``auto``."""
    names = expert_backend_choices()
    return None if value in names else f"{value!r} is unknown; choose one of {', '.join(names)}"


# ---------------------------------------------------------------------------------------------
# The rules
# ---------------------------------------------------------------------------------------------
_POSITIVE = integer(1)
_FRACTION = real(0.0, 1.0)
_BACKEND = choice(*BACKEND_CHOICES)


def _section(config_class: type, **owned_here: Check) -> dict[str, Check]:
    """``<key_prefix>.<field>`` -> check for every field of a config dataclass, in field order: the
    check the field declares, or the one given here for a field whose check belongs to the command
    line (``owned_here``)."""
    declared = field_checks(config_class)
    return {f"{config_class.key_prefix}.{name}": owned_here.get(name, declared.get(name))
            for name in (f.name for f in fields(config_class)) if name in owned_here or name in declared}


_LAYER_BACKENDS = {name: _BACKEND for name in LAYER_BACKEND_FIELDS}

RULES: dict[str, Check] = {
    "seed_everything": _seed,
    # --- model.config: what the model is
    **_section(ModelConfig),
    # --- model.optim: AdamW and its schedule. A learning rate of 0 (allowed in Python: the weights
    # stay as they are) trains nothing, so the command line refuses it.
    **_section(OptimConfig, lr=real(0.0, lo_open=True)),
    # --- model.runtime: how the model runs
    **_section(RuntimeConfig, expert_backend=_expert_backend, **_LAYER_BACKENDS),
    "model.log_expert_load_every_n_steps": integer(0),
    # --- data: the genome and its windows
    **_section(DataConfig),
    # --- trainer: the arguments biomoe's configs use (and their close relatives)
    "trainer.accelerator": _accelerator,
    "trainer.strategy": _strategy,
    "trainer.devices": _devices,
    "trainer.num_nodes": _POSITIVE,
    "trainer.max_steps": integer(-1),
    "trainer.min_steps": integer(0, optional=True),
    "trainer.max_epochs": integer(-1, optional=True),
    "trainer.min_epochs": integer(0, optional=True),
    "trainer.max_time": _duration,
    "trainer.val_check_interval": _val_check_interval,
    "trainer.check_val_every_n_epoch": integer(1, optional=True),
    "trainer.limit_train_batches": _batches,
    "trainer.limit_val_batches": _batches,
    "trainer.limit_test_batches": _batches,
    "trainer.limit_predict_batches": _batches,
    "trainer.num_sanity_val_steps": integer(-1, optional=True),
    "trainer.log_every_n_steps": integer(0, optional=True),
    "trainer.accumulate_grad_batches": _POSITIVE,
    "trainer.gradient_clip_val": real(0.0, optional=True),
    "trainer.gradient_clip_algorithm": choice(None, "norm", "value"),
    "trainer.default_root_dir": folder(),
    "trainer.enable_progress_bar": boolean(optional=True),
    "trainer.enable_checkpointing": boolean(optional=True),
    "trainer.enable_model_summary": boolean(optional=True),
    "trainer.inference_mode": boolean(),
}
"""Dotted key (as on the command line, without the subcommand) -> check."""

FREE_FORM: frozenset[str] = frozenset({
    "trainer.logger", "trainer.callbacks", "trainer.plugins", "trainer.profiler", "trainer.precision",
    "ckpt_path",
})
"""Keys checked elsewhere: class lists by :data:`CLASS_RULES`, ``trainer.precision`` by
jsonargparse (a Literal of Lightning's names), ``ckpt_path`` by the checkpoint checks."""

_CHECKPOINT_RULES: dict[str, Check] = {
    "save_top_k": integer(-1), "every_n_train_steps": integer(0, optional=True),
    "every_n_epochs": integer(0, optional=True), "mode": choice("min", "max"), "dirpath": folder(),
    "monitor": text(optional=True), "save_last": either(boolean(optional=True), choice("link"))}


def _best_save_last(value: Any) -> str | None:
    """A last checkpoint without optimizer state could not be resumed (see BestCheckpoint)."""
    if value in (None, False):
        return None
    return (f"must be off, got {value!r}: its files hold no optimizer state, so a last.ckpt written by it could "
            "not be resumed; keep save_last on a ModelCheckpoint of its own")


CLASS_RULES: dict[str, dict[str, Check]] = {
    "NonFiniteGuard": {"action": choice("stop", "skip"), "max_consecutive_skips": _POSITIVE},
    "RouterCollapseMonitor": {"threshold": real(0.0, 1.0, lo_open=True, hi_open=True), "patience": _POSITIVE,
                              "check_every_n_steps": _POSITIVE},
    "TimeBudget": {"seconds": real(0.0, lo_open=True), "measure_from": integer(0), "measure_steps": _POSITIVE,
                   "reserve": real(0.0, 1.0, hi_open=True), "round_to": _POSITIVE},
    "MarkovBaseline": {"order": integer(0, 12), "alpha": real(0.0, lo_open=True)},
    "RepeatMixture": {"k": integer(1, 31, optional=True), "switch": _FRACTION, "smoothing": real(0.0, lo_open=True)},
    "ModelCheckpoint": _CHECKPOINT_RULES,
    "BestCheckpoint": {**_CHECKPOINT_RULES, "save_last": _best_save_last},
    "LearningRateMonitor": {"logging_interval": choice(None, "step", "epoch")},
    "EarlyStopping": {"patience": integer(0), "mode": choice("min", "max"), "min_delta": real(),
                      "monitor": text()},
    "EMAWeightAveraging": {"decay": _FRACTION, "update_every_n_steps": _POSITIVE,
                           "update_starting_at_step": integer(0, optional=True),
                           "update_starting_at_epoch": integer(0, optional=True)},
    "CSVLogger": {"save_dir": folder(optional=False), "flush_logs_every_n_steps": _POSITIVE},
    "TensorBoardLogger": {"save_dir": folder(optional=False)},
    "ExpertParallelStrategy": {"expert_parallel_size": _POSITIVE, "data_parallel_replicate_size": _POSITIVE},
}
"""Init-arg checks for classes given by ``class_path`` (callbacks, loggers, strategies), by class name."""


def validate_config(config: Any, subcommand: str = "fit") -> None:
    """Raise one ConfigError ``<key>: <problem>`` for the first out-of-range value in a parsed
    ``fit``/``validate``/``test``/``predict`` configuration (the subcommand's section)."""
    config = plain(config)
    for key, check in RULES.items():
        value = lookup(config, key)
        if value is MISSING:
            continue
        problem = check(value)
        if problem:
            raise key_error(key, problem)
    for key in ("trainer.callbacks", "trainer.logger", "trainer.strategy", "trainer.plugins"):
        value = lookup(config, key)
        if value is MISSING:
            continue
        for label, init_args in class_entries(value, key):
            rules = CLASS_RULES.get(label.rsplit(".", 1)[-1], {})
            for arg, check in rules.items():
                if arg in init_args:
                    problem = check(init_args[arg])
                    if problem:
                        raise key_error(f"{label}.{arg}", problem)
    if subcommand == "fit":
        _check_fit_combinations(config)


def _check_fit_combinations(config: Mapping[str, Any]) -> None:
    """Values that are fine alone but not together (or fine for validate, not for fit)."""
    steps = lookup(config, "trainer.max_steps")
    epochs = lookup(config, "trainer.max_epochs")
    if steps == 0 or (epochs == 0 and steps in (-1, MISSING, None)):
        key = "trainer.max_steps" if steps == 0 else "trainer.max_epochs"
        raise key_error(key, "is 0: nothing would be trained (use validate to score a checkpoint)")


# ---------------------------------------------------------------------------------------------
# --config files
# ---------------------------------------------------------------------------------------------
def config_file_args(argv: Sequence[str]) -> list[str]:
    """The values of every ``--config``/``-c`` in ``argv`` (before and after the subcommand)."""
    found = []
    for i, arg in enumerate(argv):
        if arg in ("--config", "-c") and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif arg.startswith("--config="):
            found.append(arg.split("=", 1)[1])
    return found


def check_config_files(argv: Sequence[str]) -> list[str]:
    """One-line errors for ``--config`` files that jsonargparse would choke on; returns the files.

    A value that is not an existing path is left to jsonargparse (it also accepts inline YAML and
    reports a missing file itself).
    """
    files = []
    for value in config_file_args(argv):
        if not os.path.exists(value):
            if value.endswith((".yaml", ".yml", ".json")):
                raise GenomeInputError(value, "no such config file")
            continue
        if os.path.isdir(value):
            raise GenomeInputError(value, "is a folder; --config needs a YAML file")
        try:
            with open(value, "rb") as handle:
                raw = handle.read()
        except OSError as exc:
            raise GenomeInputError(value, f"cannot read config ({exc.strerror or exc})") from None
        text_ = decode_user_text(raw, value, "a YAML config")
        try:
            loaded = yaml.safe_load(text_)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise GenomeInputError(value, f"YAML syntax error at {where}{' '.join(str(problem).split())}") from None
        if loaded is not None and not isinstance(loaded, Mapping):
            raise GenomeInputError(value, f"a config must be a mapping of keys (trainer:, model:, data:), "
                                          f"got a {type(loaded).__name__}")
        files.append(value)
    return files
