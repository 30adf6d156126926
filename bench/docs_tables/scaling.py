"""The multi-GPU scaling tables, read from the scaling reports in results/scaling."""

from __future__ import annotations

from bench.docs_tables.report import Table

TABLES: dict[str, Table] = {}
