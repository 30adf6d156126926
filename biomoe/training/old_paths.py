"""The module paths training's classes had before they moved, kept working for configs and run folders.

Configs and run folders name callbacks by class path (``class_path: biomoe.callbacks.NonFiniteGuard``,
``class_path: biomoe.training.ema.EMAWeightAveraging``), so a class that moves would break every
config that names it, and every run folder whose ``config.yaml`` does. Each old path is a small
module whose module-level ``__getattr__`` (PEP 562) returns the class from its new module and says,
once per name, where it lives now. Importing an old module costs nothing: the new one, and with it
Lightning and torch, is imported only when a name is looked up. Which old path leads where is
``biomoe._OLD_MODULES``.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Iterable

__all__ = ["MovedNameWarning", "forward_names"]


class MovedNameWarning(UserWarning):
    """A config or script named a class by its old module path.

    A ``UserWarning`` rather than a ``DeprecationWarning``: Python hides those outside
    ``__main__``, and the person to tell is the one who wrote the config; ``biomoe``'s command
    line prints a biomoe module's ``UserWarning`` as one line."""


def forward_names(old_module: str, new_module: str, names: Iterable[str]) -> Callable[[str], object]:
    """A module-level ``__getattr__`` for ``old_module`` that returns ``names`` from ``new_module``
    with a :class:`MovedNameWarning`, and for any other name raises the AttributeError Python
    would, saying where the module went."""
    moved = frozenset(names)
    # Once per name and process: Python's own once-per-location registry is cleared whenever a
    # warning filter changes, which Lightning does between parsing a config and building its callbacks.
    warned: set[str] = set()

    def __getattr__(name: str) -> object:
        if name not in moved:
            raise AttributeError(f"module {old_module!r} has no attribute {name!r} (its classes moved to "
                                 f"{new_module})")
        value = getattr(importlib.import_module(new_module), name)
        if name not in warned:
            warned.add(name)
            # stacklevel 1: attributed to this biomoe module whatever looked the name up (jsonargparse,
            # a script), so the CLI prints it as one biomoe line rather than a file:line report
            warnings.warn(f"{old_module}.{name} is now {new_module}.{name}; update your config",
                          MovedNameWarning, stacklevel=1)
        return value

    return __getattr__
