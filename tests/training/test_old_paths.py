"""Configs that name a class by a module path it had before (``biomoe.callbacks.NonFiniteGuard``
from before the package layout, ``biomoe.training.ema.EMAWeightAveraging`` from before training's
subpackages, ...) still load: the class comes from its new module, with one warning line per name
saying where it lives now. A run folder's ``config.yaml`` keeps the paths the run started with, so
these are also the paths of every saved run."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import warnings

import pytest

from biomoe.training.old_paths import MovedNameWarning
from conftest import ROOT

HEALTH = "biomoe.training.guards.health"

OLD_PATHS = {
    # before the package layout: training's callbacks at the package's top level
    "biomoe.callbacks": (HEALTH, ["NonFiniteError", "NonFiniteGuard", "RouterCollapseMonitor"]),
    "biomoe.baseline": ("biomoe.training.reports.markov_baseline", ["EvaluationPassCallback", "MarkovBaseline"]),
    "biomoe.time_budget": ("biomoe.training.guards.time_budget", ["TimeBudget"]),
    "biomoe.repeat_metric": ("biomoe.training.reports.repeat_mixture", ["RepeatMixture"]),
    "biomoe.prediction_writer": ("biomoe.training.reports.prediction_writer", ["WindowScoreWriter"]),
    # before training's subpackages: every class a config can name (callbacks, loggers, the module)
    "biomoe.training.best_checkpoint": ("biomoe.training.guards.best_checkpoint", ["BestCheckpoint"]),
    "biomoe.training.callbacks": (HEALTH, ["NonFiniteError", "NonFiniteGuard", "RouterCollapseMonitor"]),
    "biomoe.training.ema": ("biomoe.training.optimization.ema", ["EMAWeightAveraging"]),
    "biomoe.training.genome_metrics": ("biomoe.training.reports.genome_metrics", ["PerGenomeMetrics"]),
    "biomoe.training.history": ("biomoe.training.reports.history", ["MetricsHistory", "RunRecord"]),
    "biomoe.training.init_weights": ("biomoe.training.optimization.init_weights", ["InitWeights"]),
    "biomoe.training.markov_baseline": ("biomoe.training.reports.markov_baseline",
                                        ["EvaluationPassCallback", "MarkovBaseline"]),
    "biomoe.training.module": ("biomoe.training.step.lightning_module", ["BioMoEModule"]),
    "biomoe.training.prediction_writer": ("biomoe.training.reports.prediction_writer", ["WindowScoreWriter"]),
    "biomoe.training.preemption": ("biomoe.training.guards.preemption", ["SaveOnSigterm"]),
    "biomoe.training.repeat_mixture": ("biomoe.training.reports.repeat_mixture", ["RepeatMixture"]),
    "biomoe.training.time_budget": ("biomoe.training.guards.time_budget", ["TimeBudget"]),
    "biomoe.training.time_limit": ("biomoe.training.guards.time_limit", ["StopAtTimeLimit"]),
    "biomoe.training.training_length": ("biomoe.training.guards.training_length", ["TrainingLength"]),
}
"""Every class a config could name at an old module path, and the module it lives in now."""


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
    with pytest.raises(AttributeError, match=rf"no attribute 'EMA' \(its classes moved to {re.escape(HEALTH)}\)"):
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

    from biomoe.training.guards.health import NonFiniteGuard

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
                                       "biomoe.training.guards.health.NonFiniteGuard; update your config"]


@pytest.mark.parametrize("callbacks, baseline", [
    ("biomoe.callbacks", "biomoe.baseline"),  # a config written before the package layout
    ("biomoe.training.callbacks", "biomoe.training.markov_baseline"),  # before training's subpackages
])
def test_a_config_naming_old_paths_parses_with_one_warning_line_per_name(tmp_path, capsys, callbacks, baseline):
    from biomoe.cli.main import main

    for old in (callbacks, baseline):
        _fresh(old)
    config = (ROOT / "configs/tiny.yaml").read_text()
    config = config.replace(f"{HEALTH}.", f"{callbacks}.").replace(
        "    - class_path: lightning.pytorch.callbacks.ModelCheckpoint",
        f"    - class_path: {baseline}.MarkovBaseline\n"
        "    - class_path: lightning.pytorch.callbacks.ModelCheckpoint")
    assert config.count(f"class_path: {callbacks}.") == 2
    path = tmp_path / "old.yaml"
    path.write_text(config)
    capsys.readouterr()
    try:
        code = main(["fit", "--config", str(path), "--print_config"])
    except SystemExit as done:
        code = done.code
    assert code in (0, None)
    out, err = capsys.readouterr()
    assert f"{callbacks}.NonFiniteGuard" in out  # the printed config is the one given
    moved = [line for line in err.splitlines() if "is now" in line]
    assert moved == [
        f"biomoe: warning: {callbacks}.NonFiniteGuard is now {HEALTH}.NonFiniteGuard; update your config",
        f"biomoe: warning: {callbacks}.RouterCollapseMonitor is now {HEALTH}.RouterCollapseMonitor; "
        "update your config",
        f"biomoe: warning: {baseline}.MarkovBaseline is now "
        "biomoe.training.reports.markov_baseline.MarkovBaseline; update your config"], err


def test_the_old_paths_are_no_files_of_the_package():
    """The package root holds no forwarding modules: the old paths are made when imported."""
    assert not [old for old in OLD_PATHS if (ROOT / (old.replace(".", "/") + ".py")).exists()]
    assert importlib.import_module("biomoe.callbacks").__spec__.origin is None


def test_shipped_configs_name_the_current_paths():
    """The recipes, the README and the notebook name each class where it lives now: the old paths
    are for configs and run folders written before, not for new ones."""
    old_path = re.compile(r"(?<![\w.])(" + "|".join(re.escape(old) for old in OLD_PATHS) + r")\.\w+")
    files = [*sorted((ROOT / "configs").rglob("*.yaml")), ROOT / "README.md",
             *sorted((ROOT / "notebooks").glob("*.ipynb"))]
    found = [f"{path.relative_to(ROOT)}: {match.group(0)}" for path in files
             for match in old_path.finditer(path.read_text(encoding="utf-8"))]
    assert found == []
