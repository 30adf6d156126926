"""Configs that name a callback by the module path it had before the package layout
(``biomoe.callbacks.NonFiniteGuard``, ``biomoe.baseline.MarkovBaseline``, ...) still load: the
class comes from its new module, with one warning line per name saying where it lives now."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

from biomoe.training.old_paths import MovedNameWarning
from conftest import ROOT

OLD_PATHS = {
    "biomoe.callbacks": ("biomoe.training.callbacks", ["NonFiniteError", "NonFiniteGuard", "RouterCollapseMonitor"]),
    "biomoe.baseline": ("biomoe.training.markov_baseline", ["EvaluationPassCallback", "MarkovBaseline"]),
    "biomoe.time_budget": ("biomoe.training.time_budget", ["TimeBudget"]),
    "biomoe.repeat_metric": ("biomoe.training.repeat_mixture", ["RepeatMixture"]),
    "biomoe.prediction_writer": ("biomoe.training.prediction_writer", ["WindowScoreWriter"]),
}
"""Every class the old top-level modules defined, and the module it lives in now."""


def _fresh(module: str):
    """The old-path module with nothing warned yet (each name warns once per process)."""
    return importlib.reload(importlib.import_module(module))


def _moved_messages(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, MovedNameWarning)]


@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_each_old_name_is_the_new_class_with_one_warning(old):
    new, names = OLD_PATHS[old]
    module = _fresh(old)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # the module itself must say each name once
        for name in names:
            assert getattr(module, name) is getattr(importlib.import_module(new), name)
            assert getattr(module, name) is getattr(importlib.import_module(new), name)
    assert _moved_messages(caught) == [f"{old}.{name} is now {new}.{name}; update your config" for name in names]
    assert all(w.filename.startswith(str(ROOT / "biomoe")) for w in caught)  # shown as biomoe's one line


def test_an_unknown_name_is_an_attribute_error_that_says_where_the_classes_went():
    module = _fresh("biomoe.callbacks")
    with pytest.raises(AttributeError, match=r"no attribute 'EMA' \(its classes moved to biomoe\.training\.callbacks"):
        _ = module.EMA
    assert not hasattr(module, "NoSuchCallback")


def test_importing_an_old_path_imports_neither_torch_nor_lightning():
    code = ("import sys\n"
            f"for name in {sorted(OLD_PATHS)!r}:\n"
            "    __import__(name)\n"
            "print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "[]", (result.stdout, result.stderr)


def test_jsonargparse_resolves_and_instantiates_an_old_class_path():
    from jsonargparse import ArgumentParser
    from lightning.pytorch import Callback

    from biomoe.training.callbacks import NonFiniteGuard

    _fresh("biomoe.callbacks")
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--callback", type=Callback)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = parser.parse_args(["--callback", '{"class_path": "biomoe.callbacks.NonFiniteGuard", '
                                                  '"init_args": {"action": "stop"}}'])
        callback = parser.instantiate_classes(config).callback
    assert type(callback) is NonFiniteGuard and callback.action == "stop"
    assert _moved_messages(caught) == ["biomoe.callbacks.NonFiniteGuard is now "
                                       "biomoe.training.callbacks.NonFiniteGuard; update your config"]


def test_a_config_naming_old_paths_parses_with_one_warning_line_per_name(tmp_path, capsys):
    from biomoe.cli.main import main

    for old in ("biomoe.callbacks", "biomoe.baseline"):
        _fresh(old)
    config = (ROOT / "configs/tiny.yaml").read_text()
    config = config.replace("biomoe.training.callbacks.", "biomoe.callbacks.").replace(
        "    - class_path: lightning.pytorch.callbacks.ModelCheckpoint",
        "    - class_path: biomoe.baseline.MarkovBaseline\n"
        "    - class_path: lightning.pytorch.callbacks.ModelCheckpoint")
    assert config.count("class_path: biomoe.callbacks.") == 2
    path = tmp_path / "old.yaml"
    path.write_text(config)
    capsys.readouterr()
    try:
        code = main(["fit", "--config", str(path), "--print_config"])
    except SystemExit as done:
        code = done.code
    assert code in (0, None)
    out, err = capsys.readouterr()
    assert "biomoe.callbacks.NonFiniteGuard" in out  # the printed config is the one given
    moved = [line for line in err.splitlines() if "is now" in line]
    assert moved == [
        "biomoe: warning: biomoe.callbacks.NonFiniteGuard is now biomoe.training.callbacks.NonFiniteGuard; "
        "update your config",
        "biomoe: warning: biomoe.callbacks.RouterCollapseMonitor is now "
        "biomoe.training.callbacks.RouterCollapseMonitor; update your config",
        "biomoe: warning: biomoe.baseline.MarkovBaseline is now biomoe.training.markov_baseline.MarkovBaseline; "
        "update your config"], err


def test_the_old_paths_are_no_files_of_the_package():
    """The package root holds no forwarding modules: the old paths are made when imported."""
    assert not [old for old in OLD_PATHS if (ROOT / (old.replace(".", "/") + ".py")).exists()]
    assert importlib.import_module("biomoe.callbacks").__spec__.origin is None
