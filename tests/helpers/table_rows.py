"""Tests of the rendered documents' tables: a line of a rendered table, and an edit of a bench report's
bf16 rows."""

from __future__ import annotations

from typing import Any, Callable


def records(data: dict[str, Any], tokens: int, contender: str) -> list[dict[str, Any]]:
    """The bf16 rows of ``contender`` at ``tokens`` per step."""
    return [r for r in data["records"] if r["tokens_per_step"] == tokens and r["contender"] == contender
            and r["precision"] == "bf16"]


def scale(tokens: int, contender: str, factor: float) -> Callable[[dict[str, Any]], None]:
    """An edit (for ``edit_json``) multiplying those rows' tokens/s by ``factor``."""
    def change(data: dict[str, Any]) -> None:
        for r in records(data, tokens, contender):
            r["tokens_per_s"] *= factor
    return change


def row(text: str, start: str) -> str:
    """The first line of a rendered table that starts with ``start``."""
    return next(line for line in text.splitlines() if line.startswith(start))
