"""Values read out of a parsed command configuration, in one place.

jsonargparse hands the CLI one subcommand's settings as a ``Namespace`` whose sections may be
nested Namespaces, plain dicts (a config loaded from YAML, a checkpoint's hyper-parameters) or
dataclasses, and whose callbacks, loggers and strategies may be given by name or in ``class_path``
/ ``init_args`` form, one or a list. Every reader of those settings (the range checks, where a run
writes, which checkpoint it resumes, which logger it needs) has to take all of these shapes; each
used to carry its own small converter, and they differed at the edges (one kept tuples, one
dropped private keys, one returned None for anything not a dict). Here each shape is handled once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["MISSING", "class_entries", "class_name", "comparable", "entries", "get", "init_args", "lookup",
           "mapping", "plain"]

MISSING: Final = object()
""":func:`lookup`'s answer for a key the configuration does not hold (None is a value users set)."""


def plain(value: Any) -> Any:
    """Namespaces, dataclass instances and mappings as dicts, all the way down (lists and tuples
    keep their type, their items converted); any other value as it is."""
    as_dict = getattr(value, "as_dict", None)
    if callable(as_dict):
        value = as_dict()
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(plain(item) for item in value)
    return value


def comparable(value: Any) -> Any:
    """:func:`plain`, with tuples as lists and private keys (``_x``, jsonargparse's ``__path__``)
    left out: the same setting recorded by a checkpoint and parsed from a command compares equal."""
    value = plain(value)
    if isinstance(value, dict):
        return {key: comparable(item) for key, item in value.items() if not key.startswith("_")}
    if isinstance(value, (list, tuple)):
        return [comparable(item) for item in value]
    return value


def mapping(value: Any) -> dict[str, Any] | None:
    """A section as a plain dict (:func:`plain`); None where it is absent or not a section."""
    value = plain(value)
    return value if isinstance(value, dict) else None


def get(section: Any, key: str, default: Any = None) -> Any:
    """``section[key]`` of a Namespace or a dict; ``default`` where the section is absent or lacks it."""
    if section is None or not hasattr(section, "get"):
        return default
    value = section.get(key)
    return default if value is None else value


def lookup(config: Mapping[str, Any], dotted: str) -> Any:
    """The value at ``a.b.c`` of a :func:`plain` configuration, stepping through ``init_args``
    where a section is given in ``class_path`` form; :data:`MISSING` where there is none."""
    node: Any = config
    for part in dotted.split("."):
        if isinstance(node, Mapping) and "init_args" in node and part not in node:
            node = node["init_args"]
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


def entries(value: Any) -> list[Any]:
    """A setting that takes one entry or a list of them (``trainer.callbacks``, ``trainer.logger``)
    as a list; none as an empty one."""
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def init_args(entry: Any) -> Any:
    """The ``init_args`` of a ``class_path`` entry, as stored (a Namespace or a dict, so that a
    change to it changes the configuration); None for an entry of any other form."""
    if entry is None or isinstance(entry, (bool, str)) or not hasattr(entry, "get"):
        return None
    return entry.get("init_args")


def class_name(entry: Any) -> str | None:
    """The class an entry names, without its module: a ``class_path`` entry's, a class path given
    as text, or an object's own type; None for ``None``, ``true``/``false`` or a section without
    a ``class_path``."""
    if entry is None or isinstance(entry, bool):
        return None
    if isinstance(entry, str):
        return entry.rsplit(".", 1)[-1]
    if hasattr(entry, "get"):
        path = entry.get("class_path")
        return str(path).rsplit(".", 1)[-1] if path else None
    return type(entry).__name__


def class_entries(value: Any, key: str) -> list[tuple[str, Mapping[str, Any]]]:
    """``(key.ClassName, init_args)`` for every ``class_path`` entry of a :func:`plain` setting."""
    found = []
    for entry in entries(value):
        if isinstance(entry, Mapping) and isinstance(entry.get("class_path"), str):
            found.append((f"{key}.{class_name(entry)}", entry.get("init_args") or {}))
    return found
