"""The vocabulary every configuration dataclass checks its fields with.

Each field of ``ModelConfig``, ``OptimConfig``, ``RuntimeConfig`` and ``DataConfig`` declares its
range once (``seq_length: int = checked(1024, integer(1))``); ``__post_init__`` checks it with the
key name users type (``data.seq_length: must be >= 1, got 0``), and the command line's validation
reads the same declarations, so a range is never written twice. No torch here: the checks run
before anything heavy is imported.
"""

from __future__ import annotations

import math
import numbers
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field, fields
from typing import Any

from biomoe.errors import ConfigError

__all__ = ["Check", "boolean", "check_fields", "check_values", "checked", "choice", "either", "field_checks", "folder",
           "integer", "is_number", "key_error", "optional", "real", "sequence_of", "text"]


Check = Callable[[Any], "str | None"]
"""A field check: ``None`` when the value is acceptable, else the problem (``"must be > 0, got -1"``)."""


# ---------------------------------------------------------------------------------------------
# Check vocabulary
# ---------------------------------------------------------------------------------------------
def is_number(value: Any) -> bool:
    """A real number, and not a bool (``True`` is not a learning rate)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def _bounds(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{_num(lo)}, {_num(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {_num(lo)}"
    return f"{'<' if hi_open else '<='} {_num(hi)}"


def real(lo: float | None = None, hi: float | None = None, lo_open: bool = False, hi_open: bool = False,
         optional: bool = False) -> Check:
    """A finite number within the bounds (``lo_open``: strictly above ``lo``)."""
    def check(value: Any) -> str | None:
        if value is None and optional:
            return None
        if not is_number(value):
            return f"must be a number, got {value!r}"
        if not math.isfinite(value):
            return f"must be a finite number, got {value}"
        if (lo is not None and (value < lo or (lo_open and value == lo))) or \
                (hi is not None and (value > hi or (hi_open and value == hi))):
            return f"must be {_bounds(lo, hi, lo_open, hi_open)}, got {value!r}"
        return None
    return check


def integer(lo: int | None = None, hi: int | None = None, optional: bool = False) -> Check:
    def check(value: Any) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            return f"must be an integer, got {value!r}"
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            return f"must be {_bounds(lo, hi, False, False)}, got {value}"
        return None
    return check


def boolean(optional: bool = False) -> Check:
    def check(value: Any) -> str | None:
        if (value is None and optional) or isinstance(value, bool):
            return None
        return f"must be true or false, got {value!r}"
    return check


def choice(*values: Any) -> Check:
    def check(value: Any) -> str | None:
        if value in values:
            return None
        shown = ", ".join("null" if v is None else str(v) for v in values)
        return f"{value!r} is not one of {shown}"
    return check


def text(optional: bool = False) -> Check:
    def check(value: Any) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value.strip():
            return f"must be a non-empty text, got {value!r}"
        return None
    return check


def either(*checks: Check) -> Check:
    """Passes if any check passes; otherwise the problems of all, joined by 'or'."""
    def check(value: Any) -> str | None:
        problems = [c(value) for c in checks]
        if any(p is None for p in problems):
            return None
        return " or ".join(dict.fromkeys(problems))
    return check


def sequence_of(item: Check, length: int | None = None, min_length: int = 0, optional: bool = False,
                unique: bool = False) -> Check:
    def check(value: Any) -> str | None:
        if value is None and optional:
            return None
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            return f"must be a list, got {value!r}"
        if length is not None and len(value) != length:
            return f"must have {length} values, got {len(value)}"
        if len(value) < min_length:
            return "must not be empty" if min_length == 1 else f"must have at least {min_length} values"
        for i, element in enumerate(value):
            problem = item(element)
            if problem:
                return f"[{i}] {problem}"
        if unique and len(set(map(str, value))) != len(value):
            repeated = next(v for i, v in enumerate(value) if v in value[:i])
            return f"lists {repeated!r} twice"
        return None
    return check


def optional(check: Check) -> Check:
    """``check``, or None."""
    return lambda value: None if value is None else check(value)


def folder(optional: bool = True) -> Check:
    """A folder to write into: anything but an existing file."""
    def check(value: Any) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, (str, os.PathLike)) or not os.fspath(value).strip():
            return f"must be a folder path, got {value!r}"
        if os.path.exists(value) and not os.path.isdir(value):
            return f"{os.fspath(value)} exists and is not a folder"
        return None
    return check


# ---------------------------------------------------------------------------------------------
# Checked fields
# ---------------------------------------------------------------------------------------------
def checked(default: Any, check: Check) -> Any:
    """A dataclass field with ``default`` whose value must pass ``check`` (run by :func:`check_fields`)."""
    return field(default=default, metadata={"check": check})


def field_checks(cls: type) -> dict[str, Check]:
    """Field name -> check, in field order, for the fields of dataclass ``cls`` that declare one."""
    return {f.name: f.metadata["check"] for f in fields(cls) if "check" in f.metadata}


def key_error(key: str, problem: str) -> ConfigError:
    """``model.optim.betas`` + ``[0] must be ...`` -> ``model.optim.betas[0]: must be ...``."""
    while (match := re.match(r"^(\[[^\]]*\]) (.*)$", problem)):
        key, problem = key + match.group(1), match.group(2)
    return ConfigError(f"{key}: {problem}")


def check_values(prefix: str, checks: Mapping[str, Check], values: Mapping[str, Any]) -> None:
    """Raise :func:`key_error` ``<prefix>.<name>: <problem>`` for the first of ``values`` (in the
    order of ``checks``) that fails its check; names without a check, or not given, are skipped."""
    for name, check in checks.items():
        if name in values:
            problem = check(values[name])
            if problem:
                raise key_error(f"{prefix}.{name}", problem)


def check_fields(config: Any) -> None:
    """Check every field of a config dataclass that declares a check; keys are named with the
    dataclass's ``key_prefix`` (where users set it: ``model.config``, ``data``)."""
    values = {f.name: getattr(config, f.name) for f in fields(config)}
    check_values(config.key_prefix, field_checks(type(config)), values)
