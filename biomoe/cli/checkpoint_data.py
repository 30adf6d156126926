"""A checkpoint's data settings for ``validate``, ``test`` and ``predict``.

``fit`` records the datamodule's settings in every checkpoint (``datamodule_hyper_parameters``).
Scoring a checkpoint with the quick-start config alone must score what the checkpoint was
trained and held out on, not the config's genomes: ``fit --data.fasta my.fa`` followed by
``validate --config ... --ckpt_path last.ckpt`` validates on ``my.fa``. What the user gives on
the command line (``--data.<key>``) still wins, and so do the settings that only say how data is
read (batch size, workers, cache folder). When the checkpoint changes anything, one line says what.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

__all__ = ["READ_ONLY_KEYS", "data_keys_on_command_line", "describe", "fasta_chosen", "settings_to_apply"]

READ_ONLY_KEYS = frozenset({"batch_size", "num_workers", "cache_dir"})
"""Data settings that say how to read, not what: the config's (or command line's) are kept."""

FILE_KEYS = frozenset({"val_files", "test_files", "file_weights", "val_contigs", "test_contigs"})
"""Settings that name files or contigs of the checkpoint's FASTA: they go with ``fasta``, so a
command line that gives other FASTA files does not inherit them."""

EVALUATING = ("validate", "test", "predict")


def data_keys_on_command_line(argv: Sequence[str]) -> set[str] | None:
    """Top-level ``data`` keys the command line sets (``--data.fasta x``, ``--data.val_contigs+=c``,
    ``--data.file_weights.a 2``); None when it sets the whole section (``--data file.yaml``)."""
    keys: set[str] = set()
    for token in argv:
        if token == "--data" or token.startswith("--data="):
            return None
        if token.startswith("--data."):
            keys.add(token[len("--data."):].split("=", 1)[0].rstrip("+").split(".", 1)[0])
    return keys


def fasta_chosen(given: set[str] | None, config_files: Sequence[Any] | None) -> bool:
    """Whether the user chose the FASTA files: on the command line (``given``, as
    :func:`data_keys_on_command_line` returns it) or in a ``--config`` file. Otherwise
    ``data.fasta`` is the bundled example genome, which a checkpoint that records no data of its
    own (``import-hf``'s) must not be silently scored on."""
    if given is None or "fasta" in given:
        return True
    for config in config_files or []:
        try:
            with open(os.fspath(getattr(config, "absolute", config))) as handle:
                loaded = yaml.safe_load(handle)
        except (OSError, yaml.YAMLError):
            return True  # read by the parser already; whatever it holds was the user's choice
        data = loaded.get("data") if isinstance(loaded, Mapping) else None
        if isinstance(data, Mapping) and "fasta" in data:
            return True
    return False


def settings_to_apply(saved: Mapping[str, Any], current: Mapping[str, Any],
                      given: set[str] | None) -> dict[str, Any]:
    """The checkpoint's values that differ from ``current`` (the parsed config) and that the user
    did not set on the command line (nor, for names of files and contigs, other FASTA files)."""
    if given is None:
        return {}
    skip = READ_ONLY_KEYS | given | (FILE_KEYS if "fasta" in given else frozenset())
    return {key: value for key, value in saved.items()
            if key in current and key not in skip and current[key] != value}


def describe(changes: Mapping[str, Any]) -> str:
    """One line for the user."""
    def short(value: Any) -> str:
        text = ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
        return text if len(text) <= 160 else text[:157] + "..."

    settings = "; ".join(f"data.{key}={short(value)}" for key, value in changes.items())
    return (f"biomoe: using the checkpoint's data settings ({settings}) instead of the config's; "
            "pass --data.<key> to choose another")
