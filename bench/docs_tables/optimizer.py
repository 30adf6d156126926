"""The optimizer tables: master-weight storage and the compiled AdamW, read from their bench reports."""

from __future__ import annotations

from bench.docs_tables.report import Table

TABLES: dict[str, Table] = {}
