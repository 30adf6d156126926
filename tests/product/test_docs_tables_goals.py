"""The goals table is what its reports hold, every ratio inside one file: a changed figure changes
its cell, and a missing result is a one-line error naming its file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.repo_copy import copy_of, edit_json
from tests.helpers.table_rows import row, scale

from bench.docs_tables import DocsTableError, goals, render
from bench.docs_tables import bench_files as files


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """A copy of every results file the goals table reads, free to change."""
    return copy_of({s for t in goals.TABLES.values() for s in t.sources}, tmp_path)


def test_the_goals_are_measured_inside_each_file(results):
    text = render("bench-goals", results)
    assert "13 % (mixtral 4,096)" in row(text, "| fp32 master weights")
    assert "(medians): not met in the medians" in row(text, "| dna-small")
    assert "92 % (47.8k against 52.1k" in row(text, "| `ExpertParallelStrategy`")
    edit_json(results, files.SINGLE_RUN, scale(4096, "biomoe-cli-nomaster", 2))
    for path in (files.SWEEP_SMALL, files.RECIPES):
        edit_json(results, path, scale(16384, "biomoe-cli", 2))
    text = render("bench-goals", results)
    assert "57 % (mixtral 4,096)" in row(text, "| fp32 master weights")
    assert "sweep: 2.18×, recipes run: 2.53× (medians): met in the medians" in row(text, "| dna-small")

    def no_strategy_fit(data: dict[str, Any]) -> None:
        data["results"] = [r for r in data["results"] if r["layout"] != "dp1xep1"]
    edit_json(results, files.STRATEGY_ONE_GPU, no_strategy_fit)
    with pytest.raises(DocsTableError, match=rf"^{files.STRATEGY_ONE_GPU}: no dp1xep1 result$"):
        render("bench-goals", results)
