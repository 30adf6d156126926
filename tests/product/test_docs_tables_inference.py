"""The use commands' tables read what their files hold: a changed rate changes the table, a file
that is not an inference report is one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.repo_copy import copy_of, edit_json

from bench import docs_tables
from bench.docs_tables import TABLES, DocsTableError



@pytest.fixture
def results_copy(tmp_path: Path) -> Path:
    return copy_of(TABLES["inference-in-process"].sources, tmp_path)



def test_the_in_process_table_follows_its_file(results_copy: Path) -> None:
    source = "results/bench/inference/genome-score.json"
    before = docs_tables.render("inference-in-process", results_copy)
    assert "| genome | score-fasta | 1.38 Mbp/s | 2.19 Mbp/s |" in before

    def halve_wall(data: dict) -> None:
        row = next(r for r in data["records"] if r["task"] == "score-fasta" and r["contender"] == "biomoe")
        row["wall_rate"] /= 2

    edit_json(results_copy, source, halve_wall)
    after = docs_tables.render("inference-in-process", results_copy)
    assert "| genome | score-fasta | 0.69 Mbp/s | 2.19 Mbp/s |" in after
    assert "0.56×" in after  # the wall ratio follows the changed rate; the compute ratio does not


def test_the_in_process_table_says_it_is_a_diagnostic_and_names_every_file(results_copy: Path) -> None:
    text = docs_tables.render("inference-in-process", results_copy)
    rows = sum(line.startswith("| ") for line in text.splitlines())
    assert rows == 2 + 8  # header, rule, then one row per network and task that both sides ran
    assert "In-process diagnostic" in text and "each ratio on its own basis" in text
    for source in TABLES["inference-in-process"].sources:
        assert f"`{source}`" in text


def test_a_file_without_measured_records_is_one_line_naming_it(results_copy: Path) -> None:
    source = "results/bench/inference/dna-small-more.json"
    edit_json(results_copy, source, lambda data: data.update(records=[]))
    with pytest.raises(DocsTableError, match="dna-small-more.json: not an inference report"):
        docs_tables.render("inference-in-process", results_copy)
