"""The model-quality tables of docs/quality.md read what their files hold: a changed value changes the
table, a file that cannot back a table is one line naming it, and figures that no file holds stay out."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.repo_copy import ROOT, copy_of, edit_json
from tests.helpers.table_rows import row

from bench import docs_tables
from bench.docs_tables import TABLES, DocsTableError


QUALITY_TABLES = ("quality-markov-orders", "quality-repeat-expert", "quality-repeat-copies",
                  "experts-corpus-side-by-side", "experts-corpus-study", "experts-study-mutations")

NO_FILE_BEHIND_THEM = (
    "1.9379",               # a forward-strand-only Markov row with no results file
    "step 171",             # where the fine-grained side-by-side run stopped: not in its summary
    "62.2 Mb", "15.8 MB", "50 MB store",  # subset and store sizes no file holds
    "97 ms", "19 ms",       # eager step times and the step profile, whose file was withdrawn
    "step-profile.md",
    "1.9185",               # per-genome bits/base of the 13M-token model: not committed
)


@pytest.fixture
def results_copy(tmp_path: Path) -> Path:
    return copy_of({s for name in QUALITY_TABLES for s in TABLES[name].sources}, tmp_path)


def test_docs_quality_shows_every_quality_table_and_names_its_files() -> None:
    shown = docs_tables.marked_tables(ROOT)
    for name in QUALITY_TABLES:
        assert "docs/quality.md" in shown[name], name
        text = docs_tables.render(name, ROOT)
        assert "2026-" in text, name
        for source in TABLES[name].sources:
            assert f"`{source}`" in text, (name, source)


def test_figures_without_a_file_stay_out_of_docs_quality() -> None:
    text = (ROOT / "docs/quality.md").read_text()
    assert [f for f in NO_FILE_BEHIND_THEM if f in text] == []


def test_the_markov_table_follows_its_file(results_copy: Path) -> None:
    source = "results/quality/markov_ecoli536.json"
    before = docs_tables.render("quality-markov-orders", results_copy)
    assert "| 1.9368 | **1.9358** | 1.9412 |" in before and "on a CPU" in before

    def order_6_best(data: dict) -> None:
        data["rows"][6]["bits_per_base"] = 1.9001

    edit_json(results_copy, source, order_6_best)
    after = docs_tables.render("quality-markov-orders", results_copy)
    assert "| **1.9001** | 1.9358 | 1.9412 |" in after
    edit_json(results_copy, source, lambda data: data.update(reverse_complement=False))
    assert "forward strand only (`--no-rc`)" in docs_tables.render("quality-markov-orders", results_copy)


def test_a_markov_file_without_rows_is_one_line_naming_it(results_copy: Path) -> None:
    edit_json(results_copy, "results/quality/markov_ecoli536.json", lambda data: data.pop("rows"))
    with pytest.raises(DocsTableError, match=r"^results/quality/markov_ecoli536.json: no 'rows'$"):
        docs_tables.render("quality-markov-orders", results_copy)


def test_the_repeat_expert_table_follows_the_re_scores_and_run_summaries(results_copy: Path) -> None:
    before = docs_tables.render("quality-repeat-expert", results_copy)
    assert row(before, "| **`configs/ecoli-mutation.yaml`** (518 s, 3,600 steps) |").endswith(
        "| 1.8410 | **1.7749** | 4.30 %: 1.760 → 0.221 |")
    rescore = "results/quality/run-summaries/ecoli-v9-wide768-mut5-repeat-expert.repeat-mix.json"
    edit_json(results_copy, rescore, lambda data: data.update(mixed_bits_per_base=1.7, repeat_fraction=0.05))
    edit_json(results_copy, "results/quality/run-summaries/ecoli-mutation.json",
              lambda data: data.update(wall_clock_s=600))
    after = docs_tables.render("quality-repeat-expert", results_copy)
    assert row(after, "| v9 ").endswith("| 1.8491 | **1.7000** | 5.00 %: 1.721 → 0.222 |")
    assert "| **`configs/ecoli-mutation.yaml`** (600 s, 3,600 steps) | 1.8410 | 1.7749 |" in after


def test_a_re_score_with_another_k_is_refused(results_copy: Path) -> None:
    rescore = "results/quality/run-summaries/ecoli-mutation.repeat-mix.json"
    edit_json(results_copy, rescore, lambda data: data.update(k=12))
    with pytest.raises(DocsTableError, match=r"^results/quality/run-summaries/ecoli-mutation.repeat-mix.json: k = 12"):
        docs_tables.render("quality-repeat-expert", results_copy)


def test_the_copies_table_follows_its_files(results_copy: Path) -> None:
    run = "results/quality/run-summaries/ecoli-mutation-1000-steps-follow-copies.json"

    def later(data: dict) -> None:
        data["last"].update({"step": 1000, "val/repeat_copy_mix_bits_per_base": 1.77})

    edit_json(results_copy, run, later)
    text = docs_tables.render("quality-repeat-copies", results_copy)
    assert "| `ecoli-mutation` network, 1,000-step schedule, at step 1,000 | 1.8794 | 1.8073 | **1.7700** |" in text
    edit_json(results_copy, "results/quality/repeats/heldout_markov7_copies.json",
          lambda data: data.update(follow_copies=False))
    with pytest.raises(DocsTableError, match="not an exact-match file then a follow_copies file"):
        docs_tables.render("quality-repeat-copies", results_copy)


def test_the_side_by_side_table_gives_equal_tokens_rows_from_the_curves(results_copy: Path) -> None:
    source = "results/experts/summary.json"
    before = docs_tables.render("experts-corpus-side-by-side", results_copy)
    assert [line.split(" |")[0] for line in before.splitlines()[2:7]] == [
        "| dense", "| moe", "| fine", "| dense at 9.8M", "| moe at 9.8M"]
    assert "| moe at 9.8M | 9.8M | 1.9719 | 1.9853 | 1.8947 |  |" in before

    def slower_moe(data: dict) -> None:
        moe = next(c for c in data["contenders"] if c["name"] == "base-moe")
        moe["tokens_per_s"] = 99_000.0
        moe["curve"]["held-out species"][2][1] = 1.5

    edit_json(results_copy, source, slower_moe)
    after = docs_tables.render("experts-corpus-side-by-side", results_copy)
    assert row(after, "| moe | 13.1M |").endswith("| 99k |")
    assert "| moe at 9.8M | 9.8M | 1.9719 | 1.9853 | 1.5000 |  |" in after


def test_a_contender_without_a_curve_is_one_line_naming_the_file(results_copy: Path) -> None:
    edit_json(results_copy, "results/experts/summary.json", lambda data: data["contenders"][0].pop("curve"))
    with pytest.raises(DocsTableError, match=r"^results/experts/summary.json: contender base-dense has no 'curve'$"):
        docs_tables.render("experts-corpus-side-by-side", results_copy)


def test_the_study_table_bolds_the_lowest_and_reads_the_training_time(results_copy: Path) -> None:
    source = "results/experts/study/summary.json"
    before = docs_tables.render("experts-corpus-study", results_copy)
    assert row(before, "| dense |").endswith("| **1.7310** (346M) | 1,292k | 6.5 min |")

    def faster_fine(data: dict) -> None:
        fine = next(c for c in data["contenders"] if c["name"] == "base-fine")
        fine["curve"]["held-out species"][9][1] = 1.7
        fine["seconds"][-1][1] = 420.0

    edit_json(results_copy, source, faster_fine)
    after = docs_tables.render("experts-corpus-study", results_copy)
    assert row(after, "| fine (32 experts, top-8) |").endswith("| **1.7000** (315M) | 750k | 7.0 min |")
    assert row(after, "| dense |").endswith("| 1.7310 (346M) | 1,292k | 6.5 min |")
    edit_json(results_copy, source, lambda data: data["contenders"][1].update(seconds=[]))
    with pytest.raises(DocsTableError, match="contender base-moe logged no training seconds"):
        docs_tables.render("experts-corpus-study", results_copy)


def test_the_mutation_table_gives_missense_beside_stop_gain(results_copy: Path) -> None:
    before = docs_tables.render("experts-study-mutations", results_copy)
    assert "| moe (8 experts, top-2) | 0.938 / 0.516 | 0.930 / 0.510 | 0.878 / 0.507 |" in before
    assert "| order-6 Markov | 0.588 / 0.497 |" in before and "stop-gain / missense" in before

    def missense(data: dict) -> None:
        data["genomes"]["hpylori_sjm180"]["model"]["auroc"]["missense_vs_synonymous"] = 0.61

    edit_json(results_copy, "results/experts/study/mutations-moe.json", missense)
    assert "| 0.878 / 0.610 |" in docs_tables.render("experts-study-mutations", results_copy)


def test_mutation_files_with_other_markov_baselines_are_refused(results_copy: Path) -> None:
    def other_markov(data: dict) -> None:
        data["genomes"]["vcholerae_h1"]["markov"]["auroc"]["stop_gain_vs_synonymous"] = 0.7

    edit_json(results_copy, "results/experts/study/mutations-fine.json", other_markov)
    with pytest.raises(DocsTableError, match=r"^results/experts/study/mutations-fine.json: other genomes or another"):
        docs_tables.render("experts-study-mutations", results_copy)
