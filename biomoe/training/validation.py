"""One check of every value a user sets, before anything is built.

jsonargparse already checks *types* (``--model.config.top_k two`` is refused while parsing). What
it cannot know are *ranges*: a negative learning rate, ``betas`` above 1, ``max_steps -5``,
``devices 0`` or a negative ``init_std`` parse fine and then fail deep inside torch or Lightning
with a traceback, or, worse, are accepted and train something meaningless (a negative weight
decay, a negative warm-up). :func:`validate_config` walks the parsed configuration of
``fit``/``validate``/``test``/``predict`` against :data:`RULES` (model, optim, runtime, data,
the trainer arguments biomoe's configs use) and :data:`CLASS_RULES` (the init args of callbacks,
loggers and strategies, by class) and raises one :class:`~biomoe.model.config.ConfigError`
``<key>: <problem>`` for the first value out of range.

:func:`check_config_files` does the same for the ``--config`` files themselves before
jsonargparse reads them: a binary file, a YAML syntax error or a YAML list is one line naming the
file (and line), not a ``UnicodeDecodeError`` or a message without a file name.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from biomoe.errors import GenomeInputError
from biomoe.files import decode_user_text
from biomoe.model.config import ConfigError

__all__ = ["RULES", "CLASS_RULES", "FREE_FORM", "validate_config", "check_config_files", "config_file_args"]

Check = Callable[[Any], "str | None"]
"""A rule: ``None`` when the value is acceptable, else the problem (``"must be > 0, got -1"``)."""

_MISSING = object()


# ---------------------------------------------------------------------------------------------
# Rule vocabulary
# ---------------------------------------------------------------------------------------------
def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def _bounds(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{_num(lo)}, {_num(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {_num(lo)}"
    return f"{'<' if hi_open else '<='} {_num(hi)}"


def real(lo: float | None = None, hi: float | None = None, lo_open: bool = False, hi_open: bool = False,
         optional: bool = False) -> Check:
    """A finite number within the bounds (``lo_open``: strictly above ``lo``)."""
    def check(value: Any) -> str | None:
        if value is None and optional:
            return None
        if not _is_number(value):
            return f"must be a number, got {value!r}"
        if not math.isfinite(value):
            return f"must be a finite number, got {value}"
        if (lo is not None and (value < lo or (lo_open and value == lo))) or \
                (hi is not None and (value > hi or (hi_open and value == hi))):
            return f"must be {_bounds(lo, hi, lo_open, hi_open)}, got {value!r}"
        return None
    return check


def integer(lo: int | None = None, hi: int | None = None, optional: bool = False) -> Check:
    def check(value: Any) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            return f"must be an integer, got {value!r}"
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            return f"must be {_bounds(lo, hi, False, False)}, got {value}"
        return None
    return check


def boolean(optional: bool = False) -> Check:
    def check(value: Any) -> str | None:
        if (value is None and optional) or isinstance(value, bool):
            return None
        return f"must be true or false, got {value!r}"
    return check


def choice(*values: Any) -> Check:
    def check(value: Any) -> str | None:
        if value in values:
            return None
        shown = ", ".join("null" if v is None else str(v) for v in values)
        return f"{value!r} is not one of {shown}"
    return check


def text(optional: bool = False) -> Check:
    def check(value: Any) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value.strip():
            return f"must be a non-empty text, got {value!r}"
        return None
    return check


def either(*checks: Check) -> Check:
    """Passes if any check passes; otherwise the problems of all, joined by 'or'."""
    def check(value: Any) -> str | None:
        problems = [c(value) for c in checks]
        if any(p is None for p in problems):
            return None
        return " or ".join(dict.fromkeys(problems))
    return check


def sequence_of(item: Check, length: int | None = None, min_length: int = 0, optional: bool = False,
                unique: bool = False) -> Check:
    def check(value: Any) -> str | None:
        if value is None and optional:
            return None
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            return f"must be a list, got {value!r}"
        if length is not None and len(value) != length:
            return f"must have {length} values, got {len(value)}"
        if len(value) < min_length:
            return "must not be empty" if min_length == 1 else f"must have at least {min_length} values"
        for i, element in enumerate(value):
            problem = item(element)
            if problem:
                return f"[{i}] {problem}"
        if unique and len(set(map(str, value))) != len(value):
            repeated = next(v for i, v in enumerate(value) if v in value[:i])
            return f"lists {repeated!r} twice"
        return None
    return check


def folder(optional: bool = True) -> Check:
    """A folder to write into: anything but an existing file."""
    def check(value: Any) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, (str, os.PathLike)) or not os.fspath(value).strip():
            return f"must be a folder path, got {value!r}"
        if os.path.exists(value) and not os.path.isdir(value):
            return f"{os.fspath(value)} exists and is not a folder"
        return None
    return check


def _fasta_paths(value: Any) -> str | None:
    if isinstance(value, (str, os.PathLike)):
        return None if os.fspath(value).strip() else "no FASTA path given (empty path)"
    if isinstance(value, Sequence) and not isinstance(value, bytes):
        if not value:
            return "no FASTA path given (an empty list)"
        for i, item in enumerate(value):
            if not isinstance(item, (str, os.PathLike)) or not os.fspath(item).strip():
                return f"[{i}] must be a FASTA file or folder path, got {item!r}"
        return None
    return f"must be a FASTA path or a list of them, got {value!r}"


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
    from lightning.pytorch.accelerators import AcceleratorRegistry

    names = ["auto", "gpu", *AcceleratorRegistry.available_accelerators()]
    return None if value.lower() in names else f"{value!r} is not one of {', '.join(dict.fromkeys(names))}"


def _strategy(value: Any) -> str | None:
    if not isinstance(value, str):
        return None  # class_path form: resolved (and type-checked) by jsonargparse
    from lightning.pytorch.strategies import StrategyRegistry

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
    if isinstance(value, bool) or not _is_number(value):
        return f"must be a count or a fraction, got {value!r}"
    if isinstance(value, int):
        return None if value >= 0 else f"must be >= 0 batches, got {value}"
    if value > 1.0 and float(value).is_integer():
        return None  # a count parsed as float (some jsonargparse versions do); Lightning reads it as one
    return None if 0.0 <= value <= 1.0 else f"a fraction must be in [0, 1] (or a whole number of batches), got {value:g}"


def _val_check_interval(value: Any) -> str | None:
    if value is None or isinstance(value, (Mapping, str)) or hasattr(value, "total_seconds"):
        return _duration(value) if isinstance(value, str) else None
    if isinstance(value, bool) or not _is_number(value):
        return f"must be a step count, a fraction of an epoch or a duration, got {value!r}"
    if isinstance(value, int):
        return None if value >= 1 else f"a step count must be >= 1, got {value}"
    return None if 0.0 < value <= 1.0 else f"a fraction of an epoch must be in (0, 1], got {value:g}"


def _seed(value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    return integer(0, 2**32 - 1)(value)


def _expert_backend(value: Any) -> str | None:
    from biomoe.model.moe.experts import known_backends

    names = list(known_backends())
    return None if value in names else f"{value!r} is unknown; choose one of {', '.join(names)}"


def _precision_name(value: Any) -> str | None:
    try:
        from biomoe.precisions import parse_precision
    except ImportError:  # older layout: the TE precision table
        from biomoe.backends.te.precision import parse_precision
    try:
        parse_precision(value)
    except (ConfigError, ValueError) as exc:
        return str(exc).split(": ", 1)[-1]
    return None


def _weights(value: Any) -> str | None:
    """Per-file sampling weights: a mapping of file label -> finite weight >= 0."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        return f"must map file names to weights, got {value!r}"
    for name, weight in value.items():
        problem = real(0.0)(weight)
        if problem:
            return f"[{name}] {problem}"
    return None


def _optional(check: Check) -> Check:
    return lambda value: None if value is None else check(value)


# ---------------------------------------------------------------------------------------------
# The rules
# ---------------------------------------------------------------------------------------------
_POSITIVE = integer(1)
_FRACTION = real(0.0, 1.0)
_BACKEND = choice("auto", "torch", "te")

RULES: dict[str, Check] = {
    "seed_everything": _seed,
    # --- model.config: what the model is
    "model.config.vocab_size": _POSITIVE,
    "model.config.hidden_size": _POSITIVE,
    "model.config.num_layers": _POSITIVE,
    "model.config.num_heads": _POSITIVE,
    "model.config.num_kv_heads": _POSITIVE,
    "model.config.num_experts": _POSITIVE,
    "model.config.top_k": _POSITIVE,
    "model.config.ffn_hidden_size": _POSITIVE,
    "model.config.dense_ffn_hidden_size": integer(1, optional=True),
    "model.config.moe_layers": sequence_of(integer(0), optional=True),
    "model.config.norm_eps": real(0.0, 1.0, lo_open=True),
    "model.config.rope_theta": real(0.0, lo_open=True),
    "model.config.aux_loss_coef": real(0.0),
    "model.config.z_loss_coef": real(0.0),
    "model.config.router_bias_update_rate": real(0.0),
    "model.config.init_std": real(0.0, lo_open=True),
    "model.config.tie_embeddings": boolean(),
    "model.config.dropout": real(0.0, 1.0, hi_open=True),
    # --- model.optim: AdamW and its schedule
    "model.optim.lr": real(0.0, lo_open=True),
    "model.optim.min_lr_ratio": _FRACTION,
    "model.optim.weight_decay": real(0.0),
    "model.optim.betas": sequence_of(real(0.0, 1.0, hi_open=True), length=2),
    "model.optim.eps": real(0.0, lo_open=True),
    "model.optim.warmup_steps": integer(0),
    "model.optim.max_steps": integer(1, optional=True),
    "model.optim.fused": boolean(optional=True),
    "model.optim.master_weights": boolean(optional=True),
    "model.optim.backend": _BACKEND,
    "model.optim.moment_dtype": choice("fp32", "bf16"),
    # --- model.runtime: how the model runs
    "model.runtime.precision": _precision_name,
    "model.runtime.precision_fallback": _optional(_precision_name),
    "model.runtime.expert_backend": _expert_backend,
    "model.runtime.attention_backend": _BACKEND,
    "model.runtime.norm_backend": _BACKEND,
    "model.runtime.router_backend": _BACKEND,
    "model.runtime.dispatch_backend": _BACKEND,
    "model.runtime.compile": boolean(),
    "model.runtime.activation_checkpointing": boolean(),
    "model.log_expert_load_every_n_steps": integer(0),
    # --- data: the genome and its windows
    "data.fasta": _fasta_paths,
    "data.seq_length": _POSITIVE,
    "data.stride": integer(1, optional=True),
    "data.batch_size": _POSITIVE,
    "data.num_workers": integer(0),
    "data.val_contigs": sequence_of(text(), optional=True, unique=True),
    "data.val_fraction": real(0.0, 1.0, hi_open=True),
    "data.max_n_fraction": _FRACTION,
    "data.rc_prob": _FRACTION,
    "data.seed": integer(0, 2**32 - 1),
    "data.fold_lowercase": boolean(),
    "data.cache_dir": folder(),
    "data.max_train_windows": integer(1, optional=True),
    "data.mutation_prob": real(0.0, 1.0, hi_open=True),
    "data.test_contigs": sequence_of(text(), optional=True, unique=True),
    "data.test_fraction": real(0.0, 1.0, hi_open=True),
    "data.val_files": sequence_of(text(), optional=True, unique=True),
    "data.test_files": sequence_of(text(), optional=True, unique=True),
    "data.file_weights": _weights,
    "data.sampling_temperature": real(0.0, lo_open=True),
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

CLASS_RULES: dict[str, dict[str, Check]] = {
    "NonFiniteGuard": {"action": choice("stop", "skip"), "max_consecutive_skips": _POSITIVE},
    "RouterCollapseMonitor": {"threshold": real(0.0, 1.0, lo_open=True, hi_open=True), "patience": _POSITIVE,
                              "check_every_n_steps": _POSITIVE},
    "TimeBudget": {"seconds": real(0.0, lo_open=True), "measure_from": integer(0), "measure_steps": _POSITIVE,
                   "reserve": real(0.0, 1.0, hi_open=True), "round_to": _POSITIVE},
    "MarkovBaseline": {"order": integer(0, 12), "alpha": real(0.0, lo_open=True)},
    "RepeatMixture": {"k": integer(1, 31, optional=True), "switch": _FRACTION, "smoothing": real(0.0, lo_open=True)},
    "ModelCheckpoint": {"save_top_k": integer(-1), "every_n_train_steps": integer(0, optional=True),
                        "every_n_epochs": integer(0, optional=True), "mode": choice("min", "max"),
                        "dirpath": folder(), "monitor": text(optional=True),
                        "save_last": either(boolean(optional=True), choice("link"))},
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


# ---------------------------------------------------------------------------------------------
# Walking a parsed config
# ---------------------------------------------------------------------------------------------
def _plain(config: Any) -> Any:
    """jsonargparse Namespace -> nested dicts (leaves untouched)."""
    as_dict = getattr(config, "as_dict", None)
    return as_dict() if callable(as_dict) else config


def _lookup(config: Mapping[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if isinstance(node, Mapping) and "init_args" in node and part not in node:
            node = node["init_args"]  # a section given in class_path form
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _class_entries(value: Any, key: str) -> list[tuple[str, Mapping[str, Any]]]:
    """(label, init_args) for every class_path entry under a key (a list, one entry, or none)."""
    entries = value if isinstance(value, list) else [value]
    found = []
    for entry in entries:
        if isinstance(entry, Mapping) and isinstance(entry.get("class_path"), str):
            name = entry["class_path"].rsplit(".", 1)[-1]
            found.append((f"{key}.{name}", entry.get("init_args") or {}))
    return found


def _fail(key: str, problem: str) -> ConfigError:
    """``model.optim.betas`` + ``[0] must be ...`` -> ``model.optim.betas[0]: must be ...``."""
    while (match := re.match(r"^(\[[^\]]*\]) (.*)$", problem)):
        key, problem = key + match.group(1), match.group(2)
    return ConfigError(f"{key}: {problem}")


def validate_config(config: Any, subcommand: str = "fit") -> None:
    """Raise one ConfigError ``<key>: <problem>`` for the first out-of-range value in a parsed
    ``fit``/``validate``/``test``/``predict`` configuration (the subcommand's section)."""
    config = _plain(config)
    for key, check in RULES.items():
        value = _lookup(config, key)
        if value is _MISSING:
            continue
        problem = check(value)
        if problem:
            raise _fail(key, problem)
    for key in ("trainer.callbacks", "trainer.logger", "trainer.strategy", "trainer.plugins"):
        value = _lookup(config, key)
        if value is _MISSING:
            continue
        for label, init_args in _class_entries(value, key):
            rules = CLASS_RULES.get(label.rsplit(".", 1)[-1], {})
            for arg, check in rules.items():
                if arg in init_args:
                    problem = check(init_args[arg])
                    if problem:
                        raise _fail(f"{label}.{arg}", problem)
    if subcommand == "fit":
        _check_fit_combinations(config)


def _check_fit_combinations(config: Mapping[str, Any]) -> None:
    """Values that are fine alone but not together (or fine for validate, not for fit)."""
    steps = _lookup(config, "trainer.max_steps")
    epochs = _lookup(config, "trainer.max_epochs")
    if steps == 0 or (epochs == 0 and steps in (-1, _MISSING, None)):
        key = "trainer.max_steps" if steps == 0 else "trainer.max_epochs"
        raise _fail(key, "is 0: nothing would be trained (use validate to score a checkpoint)")


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
    import yaml

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
