"""biomoe: Mixture-of-Experts language models for genomes, trained with PyTorch Lightning.

Importing the package imports neither torch nor the model (``cli.py --help`` stays fast): the
names below are imported the first time they are used (``from biomoe import MoETransformer``).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys

__version__ = "0.1.0"
__all__ = ["ConfigError", "ModelConfig", "ModelOutput", "MoETransformer", "OptimConfig", "__version__"]

_EXPORTS = {"ConfigError": "biomoe.model.config", "ModelConfig": "biomoe.model.config",
            "OptimConfig": "biomoe.model.config", "ModelOutput": "biomoe.model.transformer",
            "MoETransformer": "biomoe.model.transformer"}


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


# The expert backends biomoe ships (``te``, ``te_fused``) are valid in any script that names one
# in a RuntimeConfig. The registry (biomoe.model.moe.experts) must not import biomoe.backends (a
# layer above it), and importing that here would pull in torch; so once the registry's module has
# been imported, biomoe.backends becomes its loader: imported the first time names are listed or
# resolved (Transformer Engine itself only when a backend computes).
_REGISTRY = "biomoe.model.moe.experts"


def _register_biomoe_backends(registry_module) -> None:
    registry_module.EXPERT_BACKENDS.add_loader(lambda: importlib.import_module("biomoe.backends"))


class _AfterRegistryImport:
    """A meta path finder that finds nothing itself: hands the registry's module to the other finders and runs
    :func:`_register_biomoe_backends` right after that module has executed (once)."""

    def find_spec(self, name, path, target=None):
        if name != _REGISTRY:
            return None
        sys.meta_path.remove(self)
        spec = next((found for finder in sys.meta_path if hasattr(finder, "find_spec")
                     for found in [finder.find_spec(name, path, target)] if found is not None), None)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_register(module) -> None:
            exec_module(module)
            _register_biomoe_backends(module)

        spec.loader.exec_module = exec_and_register  # this loader instance loads this one file
        return spec


if _REGISTRY in sys.modules:  # the package re-imported (importlib.reload) after the registry
    _register_biomoe_backends(sys.modules[_REGISTRY])
elif not any(isinstance(finder, _AfterRegistryImport) for finder in sys.meta_path):
    sys.meta_path.insert(0, _AfterRegistryImport())


# Configs name callbacks by class path, and a run folder's config.yaml keeps the paths it was started
# with, so every class a config can name (callbacks, loggers, the LightningModule) is still found at
# the module paths it had before: ``class_path: biomoe.callbacks.NonFiniteGuard`` (before training's
# classes moved into biomoe.training) and ``class_path: biomoe.training.ema.EMAWeightAveraging``
# (before biomoe.training was split into step, optimization, reports and guards) still load, with
# one warning per name (:func:`biomoe.training.old_paths.forward_names`). No file stands for an old
# module: the finder below makes it, when it is imported, from this table.
_OLD_MODULES = {
    "biomoe.baseline": ("biomoe.training.reports.markov_baseline", ("EvaluationPassCallback", "MarkovBaseline")),
    "biomoe.callbacks": ("biomoe.training.guards.health",
                         ("NonFiniteError", "NonFiniteGuard", "RouterCollapseMonitor")),
    "biomoe.prediction_writer": ("biomoe.training.reports.prediction_writer", ("WindowScoreWriter",)),
    "biomoe.repeat_metric": ("biomoe.training.reports.repeat_mixture", ("RepeatMixture",)),
    "biomoe.time_budget": ("biomoe.training.guards.time_budget", ("TimeBudget",)),
    "biomoe.training.best_checkpoint": ("biomoe.training.guards.best_checkpoint", ("BestCheckpoint",)),
    "biomoe.training.callbacks": ("biomoe.training.guards.health",
                                  ("NonFiniteError", "NonFiniteGuard", "RouterCollapseMonitor")),
    "biomoe.training.ema": ("biomoe.training.optimization.ema", ("EMAWeightAveraging",)),
    "biomoe.training.genome_metrics": ("biomoe.training.reports.genome_metrics", ("PerGenomeMetrics",)),
    "biomoe.training.history": ("biomoe.training.reports.history", ("MetricsHistory", "RunRecord")),
    "biomoe.training.init_weights": ("biomoe.training.optimization.init_weights", ("InitWeights",)),
    "biomoe.training.markov_baseline": ("biomoe.training.reports.markov_baseline",
                                        ("EvaluationPassCallback", "MarkovBaseline")),
    "biomoe.training.module": ("biomoe.training.step.lightning_module", ("BioMoEModule",)),
    "biomoe.training.prediction_writer": ("biomoe.training.reports.prediction_writer", ("WindowScoreWriter",)),
    "biomoe.training.preemption": ("biomoe.training.guards.preemption", ("SaveOnSigterm",)),
    "biomoe.training.repeat_mixture": ("biomoe.training.reports.repeat_mixture", ("RepeatMixture",)),
    "biomoe.training.time_budget": ("biomoe.training.guards.time_budget", ("TimeBudget",)),
    "biomoe.training.time_limit": ("biomoe.training.guards.time_limit", ("StopAtTimeLimit",)),
    "biomoe.training.training_length": ("biomoe.training.guards.training_length", ("TrainingLength",)),
}


class _OldModules:
    """A meta path finder and loader for the modules of :data:`_OLD_MODULES`: each is an empty module
    whose ``__getattr__`` returns the moved classes from their new module (imported only then)."""

    def find_spec(self, name, path, target=None):
        return importlib.machinery.ModuleSpec(name, self) if name in _OLD_MODULES else None

    def create_module(self, spec):
        return None  # a plain module

    def exec_module(self, module) -> None:
        from biomoe.training.old_paths import forward_names

        new, names = _OLD_MODULES[module.__name__]
        module.__doc__ = f"Old path of :mod:`{new}`, kept so configs that name its classes here still load."
        module.__getattr__ = forward_names(module.__name__, new, names)


if not any(type(finder).__name__ == _OldModules.__name__ and type(finder).__module__ == __name__
           for finder in sys.meta_path):  # once, also when the package is reloaded
    sys.meta_path.append(_OldModules())
