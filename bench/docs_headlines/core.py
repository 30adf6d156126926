"""What a headline is and how its results file is read, shared by the per-document modules."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

ROOT = Path(__file__).resolve().parents[2]


class HeadlineSourceError(Exception):
    """A results file a headline reads that is missing or not valid JSON: one line naming it."""


def read_source(path: str, root: Path = ROOT) -> Any:
    """A results file as a headline reads it: parsed JSON, or the text of any other file (a
    profiler's table)."""
    try:
        text = (root / path).read_text()
        return json.loads(text) if path.endswith(".json") else text
    except FileNotFoundError:
        raise HeadlineSourceError(f"{path}: no such results file") from None
    except json.JSONDecodeError as err:
        raise HeadlineSourceError(f"{path}: not JSON ({err.msg}, line {err.lineno})") from None


@dataclass(frozen=True)
class Headline:
    """A figure quoted in prose: ``quote`` must be in ``document`` and contain what ``value`` reads
    from ``source``. A figure computed across files names the others in ``also``: ``value`` then
    reads every file, ``source``'s first."""

    document: str
    quote: str
    source: str
    value: Callable[..., str]
    also: tuple[str, ...] = ()

    @property
    def sources(self) -> tuple[str, ...]:
        return (self.source, *self.also)


def span(values: Iterable[float], fmt: str, dash: str = "–") -> str:
    """``low–high`` of ``values``, each written with ``fmt`` (the documents quote ranges this way)."""
    values = list(values)
    return f"{fmt.format(min(values))}{dash}{fmt.format(max(values))}"


def kilo(value: float, digits: int = 1) -> str:
    """Thousands as the documents write them: ``82.3k``, ``1,095k``."""
    return f"{value / 1e3:,.{digits}f}k"


def percent(fraction: float) -> str:
    """A fraction as the documents write it: a space before the per cent sign."""
    return f"{fraction:.0%}".replace("%", " %")
