"""biomoe: Mixture-of-Experts language models for genomes, trained with PyTorch Lightning.

Importing the package imports neither torch nor the model (``cli.py --help`` stays fast): the
names below are imported the first time they are used (``from biomoe import MoETransformer``).
"""

from __future__ import annotations

import importlib
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
