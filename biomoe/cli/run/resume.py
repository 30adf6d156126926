"""Which checkpoint ``fit`` resumes, and only if it belongs to the run the command describes.

``fit --ckpt_path last`` picks the newest ``last*.ckpt`` in the run's folder, and a folder such as
``runs/default`` collects every experiment started with the same recipe: the newest one there may
be of an unrelated run (another genome, another model, another precision) that training would then
silently continue. A Lightning checkpoint already records what makes a run that run:

* the data sources: ``datamodule_hyper_parameters`` (``fasta``, ``val_files``, ``test_files``),
  and for a prepared store what it holds (the checksums its manifest records, in the data module's
  state: :mod:`~biomoe.data.sources.store_identity`), so a store rebuilt at the same path from
  other genomes is not taken for the same data;
* the model: ``hyper_parameters["config"]`` (every ``model.config`` key);
* the precision: ``hyper_parameters["runtime"]["precision"]`` (``model.runtime.precision``) and
  ``trainer.precision`` in :class:`~biomoe.training.reports.history.RunRecord`'s callback state.

:func:`differences` compares the two and names each key that differs, with both values;
:func:`resume_from_last` resumes only a checkpoint without differences. A checkpoint named
explicitly is the user's choice, but its model replaces the one the command describes, so
:func:`check_resume_model` stops a resume whose ``model.config`` options disagree with it.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from typing import Any

from biomoe.checkpoint.read import read_checkpoint
from biomoe.checkpoint.verify import resolve_checkpoint_alias
from biomoe.cli.run.config_values import comparable, get, mapping
from biomoe.cli.run.folders import checkpoint_folders
from biomoe.data.sources.store_identity import STATE_KEY, data_checksums
from biomoe.errors import GenomeInputError
from biomoe.model.config import ModelConfig
from biomoe.training.reports.history import recorded_precision

__all__ = ["check_resume_model", "checkpoint_identity", "differences", "resume_from_last", "run_identity"]

DATA_SOURCES = ("fasta", "val_files", "test_files")
STORES = "data.stores"
"""The identity key of ``{store path: checksum}`` (see :mod:`~biomoe.data.sources.store_identity`)."""

# Lightning's short precision names and the full names it turns them into (Trainer(precision=...)).
_PRECISION_NAMES = {"32": "32-true", "16": "16-mixed", "bf16": "bf16-mixed", "64": "64-true", "None": "32-true"}


def _paths(value: Any) -> list[str] | None:
    """A FASTA setting (one path, a folder, or a list) as absolute paths; None when unset."""
    if value is None:
        return None
    items = value if isinstance(value, (list, tuple)) else [value]
    return [os.path.normpath(os.path.abspath(os.fspath(item))) for item in items]


def _precision(value: Any) -> str:
    text = str(value)
    return _PRECISION_NAMES.get(text, text)


def run_identity(section: Any) -> dict[str, Any]:
    """What makes a run that run, from one ``fit`` command's parsed config section."""
    data, model, trainer = get(section, "data"), get(section, "model"), get(section, "trainer")
    runtime = comparable(get(model, "runtime")) or {}
    identity: dict[str, Any] = {f"data.{key}": _paths(get(data, key)) for key in DATA_SOURCES}
    identity[STORES] = data_checksums(get(data, "fasta"))
    identity["model.config"] = comparable(get(model, "config")) or {}
    identity["model.runtime.precision"] = runtime.get("precision")
    identity["trainer.precision"] = _precision(get(trainer, "precision"))
    return identity


def checkpoint_identity(checkpoint: Mapping[str, Any] | None) -> dict[str, Any]:
    """The same, as a checkpoint records it (a key it does not record is missing, not compared)."""
    checkpoint = checkpoint or {}
    identity: dict[str, Any] = {}
    data = checkpoint.get("datamodule_hyper_parameters")
    if isinstance(data, Mapping):
        identity.update({f"data.{key}": _paths(data[key]) for key in DATA_SOURCES if key in data})
    from biomoe.data.datamodule import GenomeDataModule  # Lightning keeps its state under the class name

    data_state = checkpoint.get(GenomeDataModule.__qualname__)
    if isinstance(data_state, Mapping) and isinstance(data_state.get(STATE_KEY), Mapping):
        identity[STORES] = dict(data_state[STATE_KEY])
    hparams = checkpoint.get("hyper_parameters")
    if isinstance(hparams, Mapping):
        if isinstance(hparams.get("config"), Mapping):
            identity["model.config"] = comparable(hparams["config"])
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


def _store_differences(here: Mapping[str, str], there: Mapping[str, str]) -> list[str]:
    """For each store the checkpoint read whose checksum differs from that of the store at its path now."""
    found = []
    for path, recorded in there.items():
        now = here.get(path)
        if now != recorded:
            shown = _shown([path])[1:-1]
            what = f"checksum {now[:12]} here" if now else "no store there now"
            found.append(f"data.fasta: the store {shown} holds other data than when the checkpoint was written "
                         f"({what}, {recorded[:12]} in the checkpoint)")
    return found


def differences(here: Mapping[str, Any], there: Mapping[str, Any], limit: int = 4) -> list[str]:
    """``key: <here> here, <there> in the checkpoint`` for each key recorded on both sides that
    differs (``model.config`` key by key), at most ``limit`` of them and a count of the rest."""
    found: list[str] = []
    for key, value in here.items():
        if key not in there:
            continue
        other = there[key]
        if key == STORES:
            found += _store_differences(value, other)
        elif key == "model.config":
            found += [f"model.config.{name}: {_shown(value[name])} here, {_shown(other[name])} in the checkpoint"
                      for name in value if name in other and value[name] != other[name]]
        elif value != other:
            found.append(f"{key}: {_shown(value)} here, {_shown(other)} in the checkpoint")
    if len(found) > limit:
        found = found[:limit] + [f"+{len(found) - limit} more"]
    return found


def resume_from_last(section: Any) -> str | None:
    """``fit --ckpt_path last`` (``section``: the parsed ``fit`` config): the checkpoint to resume,
    or None to train from step 0.

    Lightning looks only in the new run's own checkpoint folder, which a new version folder leaves
    empty, and then trains from the start. Here it is the newest ``last*.ckpt`` of the whole run
    folder (:func:`~biomoe.cli.run.folders.checkpoint_folders`), so one command serves a job's
    first start and every restart after a SIGTERM; with none yet, training starts from step 0 and
    says so. That checkpoint is resumed only when it records the same run (:func:`differences`);
    otherwise one line names what differs and nothing starts."""
    folders = checkpoint_folders(section)
    chosen = resolve_checkpoint_alias("last", folders, missing_ok=True, announce=None)
    shown = ", ".join(dict.fromkeys(folders))
    if chosen is None:
        print(f"biomoe: ckpt_path 'last': no last*.ckpt under {shown} yet; training from the start "
              "(step 0)", file=sys.stderr)
        return None
    differ = differences(run_identity(section), checkpoint_identity(read_checkpoint(chosen)))
    if differ:
        raise GenomeInputError(chosen, f"ckpt_path 'last': the newest last checkpoint under {shown} is another "
                               f"run's ({'; '.join(differ)}); resume it with its own settings, or start "
                               "this run in its own folder (--trainer.default_root_dir)")
    print(f"biomoe: ckpt_path 'last': using {chosen} (the newest last*.ckpt under {shown}; same data, "
          "model and precision as this command)", file=sys.stderr)
    return chosen


def check_resume_model(section: Any, asked: Mapping[str, Any]) -> None:
    """``fit --ckpt_path``: the checkpoint's model replaces the one the command describes, so a
    resume whose options disagree with it would train something other than what was asked, or end
    in a shape mismatch. ``asked`` is ``model.config`` as the command gave it, ``section`` the
    ``fit`` config once the checkpoint's hyper-parameters are merged in. Stops first, in one line,
    listing each differing key and both values. A key left at its default was not asked for and
    takes the checkpoint's value."""
    ckpt = get(section, "ckpt_path")
    recorded = mapping(get(get(section, "model"), "config"))
    if not ckpt or recorded is None:
        return
    defaults = dataclasses.asdict(ModelConfig())
    differ = [key for key, value in asked.items()
              if key in recorded and recorded[key] != value and (key not in defaults or defaults[key] != value)]
    if differ:
        shown = "; ".join(f"{key}: {asked[key]!r} here, {recorded[key]!r} in the checkpoint" for key in differ[:6])
        more = f" (+{len(differ) - 6} more)" if len(differ) > 6 else ""
        raise GenomeInputError(os.fspath(ckpt), f"cannot resume: model.config differs from the checkpoint's "
                               f"({shown}{more}); give the checkpoint's values, or start a new run without --ckpt_path")
