"""The recipe and corpus tables read what their files hold: a changed value changes the table, and a
file without a value the table needs is one line naming the file and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from tests.helpers.repo_copy import copy_of, edit_json
from tests.helpers.table_rows import row

from bench import docs_tables
from bench.docs_tables import TABLES, DocsTableError
from bench.docs_tables.recipes import PACKING, SUMMARY, kilobases, strain

RECIPE_TABLES = ("recipes-genome", "recipes-genome-curves", "recipes-moe-vs-dense", "recipes-held-out",
                 "corpus-packing")


@pytest.fixture
def results_copy(tmp_path: Path) -> Path:
    return copy_of({s for name in RECIPE_TABLES for s in TABLES[name].sources}, tmp_path)


def test_the_genome_recipe_table_follows_its_file(results_copy: Path) -> None:
    before = docs_tables.render("recipes-genome", results_copy)
    assert row(before, "| *H. pylori* SJM180") == (
        "| *H. pylori* SJM180 | 1,212 | step 1,212, **1.7386** | 1.7386 | 1.8317 | **0.093** |")

    def better(data: dict[str, Any]) -> None:
        data["genome_recipe"]["hpylori_sjm180"]["kept_checkpoint"]["bits_per_base"] = 1.7
    edit_json(results_copy, SUMMARY, better)
    after = docs_tables.render("recipes-genome", results_copy)
    assert "step 1,212, **1.7000** | 1.7386 | 1.8317 | **0.132** |" in row(after, "| *H. pylori* SJM180")
    assert row(after, "| *S. aureus* RF122") == row(before, "| *S. aureus* RF122")


def test_the_lowest_validation_of_a_curve_is_the_bold_one(results_copy: Path) -> None:
    before = row(docs_tables.render("recipes-genome-curves", results_copy), "| bits/base | 1.9649")
    assert before.endswith("| 1.7400 | **1.7386** |")

    def dip(data: dict[str, Any]) -> None:
        data["genome_recipe"]["hpylori_sjm180"]["validation"]["606"] = 1.7
    edit_json(results_copy, SUMMARY, dip)
    after = row(docs_tables.render("recipes-genome-curves", results_copy), "| bits/base | 1.9649")
    assert "| **1.7000** |" in after and after.endswith("| 1.7400 | 1.7386 |")


def test_moe_against_dense_reads_the_last_validation_of_each_run(results_copy: Path) -> None:
    before = docs_tables.render("recipes-moe-vs-dense", results_copy)
    assert "| genome | MoE (step 924) | dense (step 924) | MoE − dense |" in before
    assert row(before, "| hpylori_els37") == "| hpylori_els37 | 1.7891 | 1.7905 | −0.0014 |"
    assert row(before, "| order-6 Markov") == "| order-6 Markov (pooled split) | 1.9372 | 1.9372 |  |"

    def one_more_validation(data: dict[str, Any]) -> None:
        last = dict(data["pretraining"]["dense"]["validation"]["924"])
        last["val/hpylori_els37/bits_per_base"] = 1.7
        data["pretraining"]["dense"]["validation"]["1008"] = last
    edit_json(results_copy, SUMMARY, one_more_validation)
    after = docs_tables.render("recipes-moe-vs-dense", results_copy)
    assert "| MoE (step 924) | dense (step 1,008) |" in after
    assert row(after, "| hpylori_els37") == "| hpylori_els37 | 1.7891 | 1.7000 | +0.0891 |"


def test_the_held_out_table_reads_the_last_point_of_each_curve(results_copy: Path) -> None:
    before = docs_tables.render("recipes-held-out", results_copy)
    assert "| MoE fine-tuned, step 99 | single-strain model, step 98 |" in before
    assert row(before, "| *E. coli* DH1") == "| *E. coli* DH1 | 1.9305 | 1.8872 | 1.8870 | **1.8803** | 2.0286 |"

    def dense_best(data: dict[str, Any]) -> None:
        data["held_out"]["ecoli_dh1"]["zero_shot_dense"] = 1.85
    edit_json(results_copy, SUMMARY, dense_best)
    after = docs_tables.render("recipes-held-out", results_copy)
    assert row(after, "| *E. coli* DH1") == "| *E. coli* DH1 | 1.9305 | 1.8872 | **1.8500** | 1.8803 | 2.0286 |"


def test_the_packing_table_follows_its_file(results_copy: Path) -> None:
    before = docs_tables.render("corpus-packing", results_copy)
    assert row(before, "| 131,072") == "| 131,072 | 25 (881 kb) | 99.81 % | 96.34 % |"

    def emptier(data: dict[str, Any]) -> None:
        data["by_seq_length"]["131072"]["val_real_fraction"] = 0.9
    edit_json(results_copy, PACKING, emptier)
    assert row(docs_tables.render("corpus-packing", results_copy), "| 131,072") == (
        "| 131,072 | 25 (881 kb) | 99.81 % | 90.00 % |")


def test_a_date_the_file_does_not_record_says_where_it_comes_from(results_copy: Path) -> None:
    assert "2026-12-06 (the day the file was committed; it records no date)" in docs_tables.render(
        "corpus-packing", results_copy)
    edit_json(results_copy, PACKING, lambda data: data.update(date="2026-12-24"))
    text = docs_tables.render("corpus-packing", results_copy)
    assert "CPU, Python 3.11.7, torch 2.13.0+cpu, 2026-12-24." in text and "committed" not in text


@pytest.mark.parametrize(("name", "source", "remove", "message"), [
    ("recipes-genome", SUMMARY, lambda d: d["genome_recipe"]["saureus_rf122"].pop("markov6"),
     "summary.json: no 'genome_recipe.saureus_rf122.markov6'"),
    ("recipes-genome-curves", SUMMARY, lambda d: d["genome_recipe"]["hpylori_sjm180"].update(validation={}),
     "summary.json: 'genome_recipe.hpylori_sjm180.validation' is not a curve"),
    ("recipes-moe-vs-dense", SUMMARY, lambda d: d["pretraining"].pop("dense"), "summary.json: no 'pretraining.dense'"),
    ("recipes-held-out", SUMMARY, lambda d: d.pop("device"), "summary.json: no 'device'"),
    ("corpus-packing", PACKING, lambda d: d["by_seq_length"]["8192"].update(val_real_fraction="full"),
     "packing-fill.json: 'by_seq_length.8192.val_real_fraction' is not a number"),
])
def test_a_missing_value_is_one_line_naming_the_file_and_key(results_copy: Path, name: str, source: str,
                                                             remove: Callable[[dict[str, Any]], Any],
                                                             message: str) -> None:
    edit_json(results_copy, source, remove)
    with pytest.raises(DocsTableError, match=message.replace(".", r"\.").replace("(", r"\(")) as err:
        docs_tables.render(name, results_copy)
    assert "\n" not in str(err.value)


def test_bases_and_strains_read_as_a_biologist_writes_them() -> None:
    assert [kilobases(n) for n in (40_836, 881_270, 1_204_000, 999)] == ["40.8 kb", "881 kb", "1.20 Mb", "0.999 kb"]
    assert strain("hpylori_gambia94_24") == "*H. pylori* GAMBIA94_24"
    assert strain("plasmid") == "plasmid"
