"""Whether a checkpoint belongs to the run a ``fit`` command describes.

``fit --ckpt_path last`` picks the newest ``last*.ckpt`` in the run's folder, and a folder such as
``runs/default`` collects every experiment started with the same recipe: the newest one there may
be of an unrelated run (another genome, another model, another precision) that training would then
silently continue. A Lightning checkpoint already records what makes a run that run:

* the data sources: ``datamodule_hyper_parameters`` (``fasta``, ``val_files``, ``test_files``);
* the model: ``hyper_parameters["config"]`` (every ``model.config`` key);
* the precision: ``hyper_parameters["runtime"]["precision"]`` (``model.runtime.precision``) and
  ``trainer.precision`` in :class:`~biomoe.training.history.RunRecord`'s callback state.

:func:`differences` compares the two and names each key that differs, with both values.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from biomoe.training.history import recorded_precision

__all__ = ["checkpoint_identity", "differences", "run_identity"]

DATA_SOURCES = ("fasta", "val_files", "test_files")

# Lightning's short precision names and the full names it turns them into (Trainer(precision=...)).
_PRECISION_NAMES = {"32": "32-true", "16": "16-mixed", "bf16": "bf16-mixed", "64": "64-true", "None": "32-true"}


def _plain(value: Any) -> Any:
    """Namespaces, dataclasses and tuples as plain dicts and lists, so that values compare."""
    if hasattr(value, "as_dict"):
        value = value.as_dict()
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items() if not str(k).startswith("_")}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _paths(value: Any) -> list[str] | None:
    """A FASTA setting (one path, a folder, or a list) as absolute paths; None when unset."""
    if value is None:
        return None
    items = value if isinstance(value, (list, tuple)) else [value]
    return [os.path.normpath(os.path.abspath(os.fspath(item))) for item in items]


def _precision(value: Any) -> str:
    text = str(value)
    return _PRECISION_NAMES.get(text, text)


def _get(section: Any, key: str) -> Any:
    value = section.get(key) if section is not None and hasattr(section, "get") else None
    return value


def run_identity(section: Any) -> dict[str, Any]:
    """What makes a run that run, from one ``fit`` command's parsed config section."""
    data, model, trainer = _get(section, "data"), _get(section, "model"), _get(section, "trainer")
    runtime = _plain(_get(model, "runtime")) or {}
    identity: dict[str, Any] = {f"data.{key}": _paths(_get(data, key)) for key in DATA_SOURCES}
    identity["model.config"] = _plain(_get(model, "config")) or {}
    identity["model.runtime.precision"] = runtime.get("precision")
    identity["trainer.precision"] = _precision(_get(trainer, "precision"))
    return identity


def checkpoint_identity(checkpoint: Mapping[str, Any] | None) -> dict[str, Any]:
    """The same, as a checkpoint records it (a key it does not record is missing, not compared)."""
    checkpoint = checkpoint or {}
    identity: dict[str, Any] = {}
    data = checkpoint.get("datamodule_hyper_parameters")
    if isinstance(data, Mapping):
        identity.update({f"data.{key}": _paths(data.get(key)) for key in DATA_SOURCES})
    hparams = checkpoint.get("hyper_parameters")
    if isinstance(hparams, Mapping):
        if isinstance(hparams.get("config"), Mapping):
            identity["model.config"] = _plain(hparams["config"])
        runtime = hparams.get("runtime")
        if isinstance(runtime, Mapping) and "precision" in runtime:
            identity["model.runtime.precision"] = runtime["precision"]
    precision = recorded_precision(dict(checkpoint))
    if precision is not None:
        identity["trainer.precision"] = _precision(precision)
    return identity


def _shown(value: Any) -> str:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "[" + ", ".join(os.path.relpath(v) if not os.path.relpath(v).startswith("..") else v
                               for v in value) + "]"
    return repr(value)


def differences(here: Mapping[str, Any], there: Mapping[str, Any], limit: int = 4) -> list[str]:
    """``key: <here> here, <there> in the checkpoint`` for each key recorded on both sides that
    differs (``model.config`` key by key), at most ``limit`` of them and a count of the rest."""
    found: list[str] = []
    for key, value in here.items():
        if key not in there:
            continue
        other = there[key]
        if key == "model.config":
            found += [f"model.config.{name}: {_shown(value[name])} here, {_shown(other[name])} in the checkpoint"
                      for name in value if name in other and value[name] != other[name]]
        elif value != other:
            found.append(f"{key}: {_shown(value)} here, {_shown(other)} in the checkpoint")
    if len(found) > limit:
        found = found[:limit] + [f"+{len(found) - limit} more"]
    return found
