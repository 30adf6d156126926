"""Every value a user sets is range-checked before anything is built; errors that Lightning, torch
or jsonargparse raise about user input are one line; a real bug keeps its traceback."""

from __future__ import annotations

import dataclasses
import gzip
import inspect
from pathlib import Path

import pytest

from biomoe import checks
from biomoe.model.config import ConfigError, ModelConfig, OptimConfig
from biomoe.cli.run import config_checks
from biomoe.cli.main import main
from conftest import ROOT, error_line

TINY = str(ROOT / "configs/tiny.yaml")


def _error_line(stderr: str) -> str:
    last = error_line(stderr)
    assert sum(line.startswith("biomoe: error") for line in stderr.splitlines()) == 1, stderr[-3000:]
    return last


def _fit(tmp_path: Path, *extra: str) -> list[str]:
    return ["fit", "--config", TINY, "--data.cache_dir", str(tmp_path / "cache"),
            "--trainer.default_root_dir", str(tmp_path / "run"), "--trainer.logger", "false",
            "--trainer.max_steps", "2", *extra]


# Each reached torch or Lightning unchecked: a traceback, a wrong cause, or a run that trained on
# a meaningless setting and exited 0.
BAD_VALUES = [
    (["--model.optim.lr", "-0.001"], "model.optim.lr: must be > 0, got -0.001"),
    (["--model.optim.lr", "-1e-3"], "model.optim.lr: must be > 0, got -0.001"),  # not taken for an option
    (["--model.optim.lr", "nan"], "model.optim.lr: Expected a <class 'float'>. Got value: nan"),  # jsonargparse
    (["--model.optim.betas", "[1.5, 0.9]"], "model.optim.betas[0]: must be in [0, 1), got 1.5"),
    (["--model.optim.betas", "[0.9]"], "model.optim.betas: Expected a tuple with 2 elements"),
    (["--model.optim.weight_decay", "-1"], "model.optim.weight_decay: must be >= 0, got -1"),
    (["--model.optim.warmup_steps", "-10"], "model.optim.warmup_steps: must be >= 0, got -10"),
    (["--model.optim.eps", "0"], "model.optim.eps: must be > 0, got 0"),
    (["--model.optim.min_lr_ratio", "2"], "model.optim.min_lr_ratio: must be in [0, 1], got 2"),
    (["--model.config.init_std", "-1"], "model.config.init_std: must be > 0, got -1"),
    (["--model.config.rope_theta", "0"], "model.config.rope_theta: must be > 0, got 0"),
    (["--model.config.norm_eps", "-1"], "model.config.norm_eps: must be in (0, 1], got -1"),
    (["--model.config.aux_loss_coef", "inf"], "model.config.aux_loss_coef: Expected a <class 'float'>"),
    (["--model.config.router_bias_update_rate", "-0.1"], "model.config.router_bias_update_rate: must be >= 0"),
    (["--trainer.max_steps", "-5"], "trainer.max_steps: must be >= -1, got -5"),
    (["--trainer.max_steps", "0"], "trainer.max_steps: is 0: nothing would be trained"),
    (["--trainer.devices", "0"], "trainer.devices: must be >= 1, -1 (all) or auto"),
    (["--trainer.strategy", "no.such.Strategy"], "trainer.strategy: 'no.such.Strategy' is neither a strategy name"),
    (["--trainer.strategy", "fastest"], "trainer.strategy: 'fastest' is not a strategy name"),
    (["--trainer.accelerator", "quantum"], "trainer.accelerator: 'quantum' is not one of"),
    (["--trainer.precision", "7"], "trainer.precision: must be one of 64, 32, 16,"),
    (["--trainer.val_check_interval", "-1"], "trainer.val_check_interval: a step count must be >= 1, got -1"),
    (["--trainer.val_check_interval", "1.5"], "trainer.val_check_interval: a fraction of an epoch must be in (0, 1]"),
    (["--trainer.gradient_clip_val", "-1"], "trainer.gradient_clip_val: must be >= 0, got -1"),
    (["--trainer.limit_val_batches", "-2"], "trainer.limit_val_batches: must be >= 0 batches, got -2"),
    (["--trainer.max_time", "ten minutes"], "trainer.max_time: must be a duration DD:HH:MM:SS"),
    (["--trainer.num_nodes", "0"], "trainer.num_nodes: must be >= 1, got 0"),
    (["--trainer.accumulate_grad_batches", "0"], "trainer.accumulate_grad_batches: must be >= 1, got 0"),
    (["--seed_everything", "-3"], "seed_everything: must be in [0, 4294967295], got -3"),
    (["--data.fasta", "[]"], "data.fasta: no FASTA path given (an empty list)"),
    (["--data.seed", "-1"], "data.seed: must be in [0, 4294967295], got -1"),
    (["--data.seq_length", "0"], "data.seq_length: must be >= 1, got 0"),
    (["--data.max_n_fraction", "1.2"], "data.max_n_fraction: must be in [0, 1], got 1.2"),
    (["--data.val_contigs", "[a, a]"], "data.val_contigs: lists 'a' twice"),
    (["--trainer.callbacks+", "lightning.pytorch.callbacks.EarlyStopping", "--trainer.callbacks.monitor", "val/ce",
      "--trainer.callbacks.patience", "-1"], "trainer.callbacks.EarlyStopping.patience: must be >= 0, got -1"),
    (["--trainer.callbacks+", "biomoe.training.reports.markov_baseline.MarkovBaseline",
      "--trainer.callbacks.order", "40"],
     "trainer.callbacks.MarkovBaseline.order: must be in [0, 12], got 40"),
]


# Through the whole command line (parsing, jsonargparse's own checks, the seed, callbacks); the
# others go straight to the validation layer below, which is what the command line calls.
THROUGH_THE_CLI = {"--model.optim.lr -0.001", "--model.optim.lr -1e-3", "--model.optim.lr nan",
                   "--model.optim.betas [1.5, 0.9]", "--trainer.max_steps -5", "--trainer.devices 0",
                   "--trainer.strategy no.such.Strategy", "--trainer.precision 7", "--model.config.init_std -1",
                   "--seed_everything -3", "--data.fasta []", "--model.optim.betas [0.9]",
                   "--model.config.aux_loss_coef inf"}
CLI_CASES = [case for case in BAD_VALUES if " ".join(case[0]) in THROUGH_THE_CLI or "callbacks" in case[0][0]]
DIRECT_CASES = [case for case in BAD_VALUES if case not in CLI_CASES]


# the first case runs in `make test`, the rest in `make test-slow`
@pytest.mark.parametrize("args, expected", [case if i == 0 else pytest.param(*case, marks=pytest.mark.slow)
                                            for i, case in enumerate(CLI_CASES)],
                         ids=[" ".join(a) for a, _ in CLI_CASES])
def test_bad_value_is_one_line_naming_the_key(tmp_path: Path, capsys, args: list[str], expected: str) -> None:
    assert main(_fit(tmp_path, *args)) == 2
    assert expected in _error_line(capsys.readouterr().err)
    assert not (tmp_path / "run").exists()  # refused before anything was built or written


def _tiny_with(key: str, text: str) -> dict:
    import yaml

    config = yaml.safe_load(Path(TINY).read_text())
    node = config
    *parents, last = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = yaml.safe_load(text)  # the value as jsonargparse would have parsed it
    return config


@pytest.mark.parametrize("args, expected", DIRECT_CASES, ids=[" ".join(a) for a, _ in DIRECT_CASES])
def test_bad_value_is_refused_by_the_validation_layer(args: list[str], expected: str) -> None:
    config = _tiny_with(args[0].lstrip("-"), args[1])
    with pytest.raises(ConfigError) as info:
        config_checks.validate_config(config)
    assert expected in str(info.value)


def test_callback_init_args_in_a_config_file(tmp_path: Path, capsys) -> None:
    config = tmp_path / "cb.yaml"
    config.write_text("trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
                      "      init_args:\n        save_top_k: -3\n")
    assert main(_fit(tmp_path, "--config", str(config))) == 2
    assert "trainer.callbacks.ModelCheckpoint.save_top_k: must be >= -1, got -3" in _error_line(capsys.readouterr().err)


# ------------------------------------------------------------------------------ --config files
@pytest.mark.parametrize("content, expected", [
    (gzip.compress(b"trainer: {}\n"), "is gzip-compressed, not a YAML config"),
    (b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x01", "not a YAML config (not UTF-8 text"),
    (b"trainer:\n  max_steps: [1\n  foo: : bar\n", "YAML syntax error at line 3, column 6"),
    (b"- fit\n- validate\n", "a config must be a mapping of keys (trainer:, model:, data:), got a list"),
])
def test_bad_config_file_names_the_file(tmp_path: Path, capsys, content: bytes, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    assert main(["fit", "--config", str(path)]) == 2
    line = _error_line(capsys.readouterr().err)
    assert line.startswith(f"biomoe: error: {path}: ") and expected in line


def test_missing_config_file_names_it(tmp_path: Path, capsys) -> None:
    assert main(["fit", "--config", str(tmp_path / "nope.yaml")]) == 2
    assert f"{tmp_path / 'nope.yaml'}: no such config file" in _error_line(capsys.readouterr().err)


# -------------------------------------------------------------------------------- the rule table
def _fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_every_option_biomoe_exposes_has_a_rule() -> None:
    """A new option needs a range check (or a reason it needs none) before it reaches users."""
    from biomoe.data.datamodule import GenomeDataModule
    from biomoe.training.step.lightning_module import BioMoEModule

    expected = {f"model.config.{name}" for name in _fields(ModelConfig)}
    expected |= {f"model.optim.{name}" for name in _fields(OptimConfig)}
    try:
        from biomoe.model.config import RuntimeConfig
    except ImportError:
        RuntimeConfig = None
    if RuntimeConfig is not None:
        expected |= {f"model.runtime.{name}" for name in _fields(RuntimeConfig)}
    module_args = set(inspect.signature(BioMoEModule.__init__).parameters) - {"self", "config", "optim", "runtime"}
    expected |= {f"model.{name}" for name in module_args}
    expected |= {f"data.{name}" for name in set(inspect.signature(GenomeDataModule.__init__).parameters) - {"self"}}
    missing = sorted(expected - set(config_checks.RULES) - config_checks.FREE_FORM)
    assert not missing, f"no validation rule for: {missing}"


def test_every_trainer_argument_in_the_shipped_configs_has_a_rule() -> None:
    import yaml

    used: set[str] = set()
    for path in (ROOT / "configs").rglob("*.yaml"):
        used |= {f"trainer.{key}" for key in (yaml.safe_load(path.read_text()).get("trainer") or {})}
    missing = sorted(used - set(config_checks.RULES) - config_checks.FREE_FORM)
    assert not missing, f"no validation rule for: {missing}"


def test_every_shipped_config_passes_validation() -> None:
    """The rules refuse nothing the project itself ships."""
    import yaml

    for path in (ROOT / "configs").rglob("*.yaml"):
        config_checks.validate_config(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize("check, good, bad", [
    (checks.real(0.0, lo_open=True), [1e-9, 3, 2.5], [0, -1, float("nan"), float("inf"), "1", True, None]),
    (checks.integer(1, optional=True), [1, 10**9, None], [0, 1.5, True, "3"]),
    (checks.sequence_of(checks.real(0.0, 1.0, hi_open=True), length=2), [(0.9, 0.95), [0, 0.5]],
     [(1.0, 0.9), (0.9,), "0.9,0.95", None]),
    (config_checks._devices, [1, "auto", -1, "0,1", [0, 1], "2"], [0, "0", -2, [], [-1], "gpu", 1.5]),
    (config_checks._batches, [None, 0, 5, 0.0, 0.5, 1.0], [-1, 1.5, "all", True]),
])
def test_rules(check, good, bad) -> None:
    for value in good:
        assert check(value) is None, value
    for value in bad:
        assert isinstance(check(value), str), value


# ------------------------------------------------------------------------ the mapping of errors
def test_lightning_misconfiguration_is_one_line(tmp_path: Path, capsys) -> None:
    """Lightning's own refusal of a setting (here: validating more often than there are training
    batches in an epoch, known only once the data is loaded) becomes one line with the key."""
    code = main(_fit(tmp_path, "--trainer.max_steps", "50", "--trainer.val_check_interval", "10000",
                     "--trainer.check_val_every_n_epoch", "1"))
    assert code == 2
    line = _error_line(capsys.readouterr().err)
    assert line.startswith("biomoe: error: trainer.val_check_interval: ") and "number of the training batches" in line


def test_a_real_bug_keeps_its_traceback(tmp_path: Path, monkeypatch) -> None:
    """A bug in a training step is not the user's input: no one-line summary hides it."""
    from biomoe.training.step.lightning_module import BioMoEModule

    def broken(self, batch, batch_idx):
        raise AttributeError("'NoneType' object has no attribute 'logits'")

    monkeypatch.setattr(BioMoEModule, "training_step", broken)
    with pytest.raises(AttributeError, match="no attribute 'logits'"):
        main(_fit(tmp_path))


def test_a_value_error_from_our_own_code_mid_run_keeps_its_traceback(tmp_path: Path, monkeypatch) -> None:
    from biomoe.training.step.lightning_module import BioMoEModule

    def broken(self, batch, batch_idx):
        raise ValueError("shapes (8, 128) and (8, 127) do not match")

    monkeypatch.setattr(BioMoEModule, "training_step", broken)
    with pytest.raises(ValueError, match="do not match"):
        main(_fit(tmp_path))


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="model.optim.lr"):
        main(_fit(tmp_path, "--model.optim.lr", "-1", "--debug"))


def test_classify_reads_errors_from_dataloader_workers() -> None:
    """torch re-raises a worker's GenomeInputError as a RuntimeError holding the worker's traceback."""
    from biomoe.cli.user_errors import classify

    text = ("Caught GenomeInputError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
            '  File "x.py", line 1, in f\nbiomoe.errors.GenomeInputError: g.fa: changed while biomoe was reading it')
    found = classify(RuntimeError(text))
    assert found is not None and found.message == "g.fa: changed while biomoe was reading it" and found.exit_code == 2
    assert classify(RuntimeError("CUDA error: an illegal memory access was encountered")) is None
