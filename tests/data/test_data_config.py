"""Each setting's range is declared once, on its dataclass: building it with a bad value is the same
one-line error, naming the key a user types, as the command line's check before anything is built."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest

from biomoe.data.config import DataConfig, check_settings, takes_fields_of
from biomoe.data.datamodule import GenomeDataModule
from biomoe.model.config import ConfigError, ModelConfig, OptimConfig, RuntimeConfig
from biomoe.cli.run import config_checks

BAD_DATA = [
    ("seq_length", 0, "data.seq_length: must be >= 1, got 0"),
    ("seq_length", 12.5, "data.seq_length: must be an integer, got 12.5"),
    ("stride", 0, "data.stride: must be >= 1, got 0"),
    ("batch_size", 0, "data.batch_size: must be >= 1, got 0"),
    ("num_workers", -1, "data.num_workers: must be >= 0, got -1"),
    ("val_fraction", 1.0, "data.val_fraction: must be in [0, 1), got 1.0"),
    ("max_n_fraction", 1.2, "data.max_n_fraction: must be in [0, 1], got 1.2"),
    ("rc_prob", -0.1, "data.rc_prob: must be in [0, 1], got -0.1"),
    ("seed", -1, "data.seed: must be in [0, 4294967295], got -1"),
    ("fold_lowercase", "yes", "data.fold_lowercase: must be true or false, got 'yes'"),
    ("max_train_windows", 0, "data.max_train_windows: must be >= 1, got 0"),
    ("mutation_prob", 1.0, "data.mutation_prob: must be in [0, 1), got 1.0"),
    ("val_contigs", ["c", "c"], "data.val_contigs: lists 'c' twice"),
    ("test_files", [""], "data.test_files[0]: must be a non-empty text, got ''"),
    ("fasta", [], "data.fasta: no FASTA path given (an empty list)"),
    ("file_weights", {"big": -1}, "data.file_weights[big]: must be >= 0, got -1"),
    ("sampling_temperature", 0, "data.sampling_temperature: must be > 0, got 0"),
]


@pytest.mark.parametrize("key, value, message", BAD_DATA, ids=[f"{k}={v!r}" for k, v, _ in BAD_DATA])
def test_a_bad_data_setting_is_one_line_naming_its_key(key, value, message) -> None:
    for build in (DataConfig, GenomeDataModule):
        with pytest.raises(ConfigError) as info:
            build(**{key: value})
        assert str(info.value) == message
    with pytest.raises(ConfigError) as info:  # the command line's check, on the parsed config
        config_checks.validate_config({"data": {key: value}})
    assert str(info.value) == message


def test_settings_that_must_fit_together_are_checked_when_built() -> None:
    with pytest.raises(ConfigError, match=r"^data.val_fraction \+ data.test_fraction must be below 1, got 1.0$"):
        DataConfig(val_fraction=0.5, test_fraction=0.5)
    DataConfig(val_fraction=0.5, test_fraction=0.5, val_contigs=["c"])  # named contigs replace the fraction
    with pytest.raises(ConfigError, match=r"^data.stride: must be >= 1, got 0$"):
        check_settings(seq_length=10, stride=0)


def test_an_assigned_setting_is_checked_too(tmp_path) -> None:
    dm = GenomeDataModule(seq_length=64, cache_dir=str(tmp_path))
    dm.batch_size = 3
    assert dm.config.batch_size == 3 and dm.batch_size == 3
    with pytest.raises(ConfigError, match=r"^data.batch_size: must be >= 1, got 0$"):
        dm.batch_size = 0
    assert dm.batch_size == 3


def test_the_datamodule_takes_exactly_the_config_fields() -> None:
    """Names, order, defaults and types: the keys users type (``--data.seq_length``) and the flat
    ``datamodule_hyper_parameters`` checkpoints record are DataConfig's fields."""
    params = list(inspect.signature(GenomeDataModule.__init__).parameters.values())[1:]
    fields = dataclasses.fields(DataConfig)
    assert [p.name for p in params] == [f.name for f in fields]
    assert [p.default for p in params] == [f.default for f in fields]
    hints, declared = typing.get_type_hints(GenomeDataModule.__init__), typing.get_type_hints(DataConfig)
    assert [hints[f.name] for f in fields] == [declared[f.name] for f in fields]
    assert dict(GenomeDataModule(seq_length=64).hparams) == dataclasses.asdict(DataConfig(seq_length=64))


def test_a_signature_that_drifts_from_the_config_is_refused_when_defined() -> None:
    with pytest.raises(TypeError, match="has 'batch_size' where DataConfig has 'seq_length'"):
        @takes_fields_of(DataConfig)
        def __init__(self, fasta: str = "x", batch_size: int = 8) -> None: ...


def test_model_sections_check_their_fields_as_the_command_line_does() -> None:
    """For every field rule of model.config/optim/runtime: the dataclass refuses the same values with
    the same message (model.optim.lr excepted: 0 is a valid Python setting, the command line refuses it)."""
    sections = {"model.config": ModelConfig, "model.optim": OptimConfig, "model.runtime": RuntimeConfig,
                "data": DataConfig}
    checked = 0
    for key, rule in config_checks.RULES.items():
        prefix, _, name = key.rpartition(".")
        cls = sections.get(prefix)
        if cls is None or key in ("model.optim.lr",) or name.endswith("backend"):
            continue
        for value in (-1, 0, 1.5, "x", None, [], [2.0, 0.5], True):
            problem = rule(value)
            if problem is None:
                continue
            with pytest.raises(ConfigError) as info:
                cls(**{name: value})
            assert str(info.value) == str(config_checks.key_error(key, problem)), (key, value)
            checked += 1
    assert checked > 150
    OptimConfig(lr=0.0)
    with pytest.raises(ConfigError, match=r"^model.optim.lr: must be > 0, got 0$"):
        config_checks.validate_config({"model": {"optim": {"lr": 0}}})
