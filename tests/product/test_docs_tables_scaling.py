"""The scaling tables read what their reports hold: a changed point changes its cell, the machine
comes from each point's own environment (never the machine that merged the points), and points
that record none say where their machine is named instead."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.repo_copy import ROOT, copy_of, edit_json

from bench import docs_tables
from bench.docs_tables import TABLES, DocsTableError, Report
from bench.docs_tables import scaling as scaling_tables

TWO, FOUR = scaling_tables.TWO_GPU, scaling_tables.FOUR_GPU


@pytest.fixture
def results_copy(tmp_path: Path) -> Path:
    return copy_of((TWO, FOUR), tmp_path)



def _point(data: dict[str, Any], layers: int, precision: str, layout: str) -> dict[str, Any]:
    return next(p for p in data["results"]
                if (p["layers"], p["precision"], p["layout"]) == (layers, precision, layout))


def _row(text: str, label: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {label} |"))


def test_the_two_gpu_table_follows_its_file(results_copy: Path) -> None:
    before = docs_tables.render("scaling-2gpu", results_copy)
    assert _row(before, "bf16") == "| bf16 | 53,113 | 35,996 | 43,192 (120 %) | 38,344 (107 %) |"
    assert _row(before, "fp8-block") == "| fp8-block | — | 30,365 | 41,663 (137 %) | 33,699 (111 %) |"

    def slower_ep2(data: dict[str, Any]) -> None:
        point = _point(data, 2, "bf16", "dp1xep2")
        point["tokens_per_s_per_gpu"], point["efficiency"] = 30_000.0, 30_000.0 / 35_996.30859375

    edit_json(results_copy, TWO, slower_ep2)
    after = docs_tables.render("scaling-2gpu", results_copy)
    assert _row(after, "bf16") == "| bf16 | 53,113 | 35,996 | 30,000 (83 %) | 38,344 (107 %) |"


def test_the_four_gpu_table_shows_memory_sharing_and_missing_points(results_copy: Path) -> None:
    text = docs_tables.render("scaling-4gpu", results_copy)
    assert _row(text, "8 layers, fp8-block") == (
        "| 8 layers, fp8-block | 10,493 (128.5 GB)† | — | 12,230 (117 %, 47.1 GB) | 10,915 (104 %, 51.5 GB) |")
    assert _row(text, "32 layers, fp8-block, activation checkpointing").endswith("| — | — | 2,343 (99.7 GB) | — |")
    assert "† ran beside 3 other 1-GPU runs" in text and "‡ ran beside 1 other 2-GPU run" in text
    assert "15 or 40 timed steps" in text

    edit_json(results_copy, FOUR, lambda data: _point(data, 32, "fp8-block", "dp1xep4").update(peak_mem_gb=70.0))
    assert "2,343 (70.0 GB)" in docs_tables.render("scaling-4gpu", results_copy)


def test_old_points_name_where_the_machine_comes_from_not_the_merging_machine(results_copy: Path) -> None:
    for name in ("scaling-2gpu", "scaling-4gpu"):
        text = docs_tables.render(name, results_copy)
        assert "The file records no GPU, software or date" in text
        assert "the CPU machine that merged the points, not the one that ran them" in text
        assert "`results/README.md` names NVIDIA H200s" in text and "first committed on 2026-11-29" in text
        assert "3.11.7" not in text and "2.13.0+cpu" not in text  # the merging machine's software


def test_the_readme_the_footer_cites_still_names_the_machine() -> None:
    readme = " ".join((ROOT / scaling_tables.RUNS_README).read_text().split())
    assert "the multi-GPU scaling ran on NVIDIA H200s" in readme
    torch_te = re.sub(r"^NVIDIA H200s, ", "", scaling_tables.RUNS_README_NAMES)
    assert f"{torch_te} throughout" in readme


def test_points_that_record_their_machine_are_read_and_the_merging_machine_is_not(results_copy: Path) -> None:
    run_env = {"gpu": "NVIDIA H200", "gpu_count": 2, "torch": "2.12.0+cu130", "transformer_engine": "2.21.0",
               "date": "2027-01-05"}

    def recorded(data: dict[str, Any]) -> None:
        data["environment"] = {"gpu": "NVIDIA MERGER", "date": "2027-02-01"}
        for point in data["results"]:
            point["environment"] = dict(run_env)
        data["results"][0]["environment"]["date"] = "2027-01-04"

    edit_json(results_copy, TWO, recorded)
    text = docs_tables.render("scaling-2gpu", results_copy)
    assert ("Machine, from each point's `environment`: NVIDIA H200 (2 visible), 2027-01-04 to 2027-01-05; "
            "torch 2.12.0+cu130, Transformer Engine 2.21.0.") in text
    assert "MERGER" not in text and "2027-02-01" not in text and "results/README.md" not in text


def test_a_report_of_unrecorded_points_without_notes_is_refused() -> None:
    data = json.loads((ROOT / TWO).read_text())
    with pytest.raises(DocsTableError, match=r"^results/scaling/elsewhere/scaling.json: 7 of 7 points record no GPU"):
        TABLES["scaling-2gpu"].render([Report("results/scaling/elsewhere/scaling.json", data)])


@pytest.mark.parametrize("change, fragment", [
    (lambda data: data.pop("results"), "not a scaling report (no 'results' list)"),
    (lambda data: data["results"][0].pop("tokens_per_s_per_gpu"), "a point without tokens_per_s_per_gpu"),
    (lambda data: data["results"][0].update(layout="dp4xep1"), "layout dp4xep1 has no column in this table"),
])
def test_a_report_the_table_cannot_show_is_one_line_naming_it(results_copy: Path, change, fragment) -> None:
    edit_json(results_copy, TWO, change)
    with pytest.raises(DocsTableError) as err:
        docs_tables.render("scaling-2gpu", results_copy)
    message = str(err.value)
    assert message.startswith(f"{TWO}: ") and fragment in message and "\n" not in message
