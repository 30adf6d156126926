"""A checkpoint's hyper-parameters as the model configuration: the one place that turns them back
into a :class:`~biomoe.model.config.ModelConfig`.

``BioMoEModule.save_hyperparameters`` records ``config`` as a dataclass; a checkpoint edited by
hand, written by ``import-hf`` or by an older biomoe holds a plain dict, possibly with keys this
version does not know (they are ignored, so a newer field never breaks an older reader). The
values are checked exactly as a user's would be.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from biomoe.errors import GenomeInputError
from biomoe.model.config import ConfigError, ModelConfig

__all__ = ["model_config_from", "recorded_model_config"]


def model_config_from(given: Any) -> ModelConfig:
    """A ModelConfig from a dataclass or a dict of its fields (unknown keys ignored); the default
    configuration for None. Bad values raise :class:`~biomoe.model.config.ConfigError`."""
    if given is None:
        return ModelConfig()
    if isinstance(given, ModelConfig):
        given = dataclasses.asdict(given)
    if not isinstance(given, Mapping):
        raise ConfigError(f"model config is a {type(given).__name__}, not a mapping of ModelConfig fields")
    known = {f.name for f in dataclasses.fields(ModelConfig)}
    return ModelConfig(**{k: v for k, v in given.items() if k in known})


def recorded_model_config(path: str | os.PathLike[str], ckpt: Mapping[str, Any]) -> ModelConfig | None:
    """The ModelConfig a loaded checkpoint records (``hyper_parameters.config``), None when it
    records none; an invalid record is one line naming the checkpoint."""
    hparams = ckpt.get("hyper_parameters") or {}
    given = hparams.get("config") if isinstance(hparams, Mapping) else None
    if given is None:
        return None
    if not isinstance(given, (Mapping, ModelConfig)):
        raise GenomeInputError(path, f"hyper_parameters.config is a {type(given).__name__}, not a model config")
    try:
        return model_config_from(given)
    except (ConfigError, TypeError, ValueError) as exc:
        raise GenomeInputError(path, f"recorded model config is invalid ({exc})") from None
