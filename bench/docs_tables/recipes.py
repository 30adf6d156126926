"""The per-genome recipe tables of docs/recipes.md and docs/corpus.md, read from their runs' files."""

from __future__ import annotations

from bench.docs_tables.report import Table

TABLES: dict[str, Table] = {}
