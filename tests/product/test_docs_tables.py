"""The measurement tables of README.md and docs/ are what their results files render, and the
headline figures quoted in prose are what their files hold (``make docs-tables``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.repo_copy import copy_of

from bench import docs_tables
from bench.docs_headlines import HEADLINES, headline_problems
from bench.docs_tables import TABLES, DocsTableError, main, marked_tables, rendered_text, stale_tables

ROOT = Path(__file__).resolve().parents[2]

NO_FILE_BEHIND_THEM = (
    "488 steps/s",                 # generate with one sample: no results file holds it
    "1.52 against 0.42 Mbp/s",     # bf16 against fp32 scoring rates: not in results/
    "0.77-0.78", "0.77–0.78",      # stop-gain AUROC of a mutations folder that does not exist
    "transformers reference", "Mixtral reference",  # a 1.853 bits/base never run with this repository
    "0.0001 bits/base of fp32",    # bf16 against fp32 scoring: no file compares them
    "18 times slower",             # bf16-mixed against 32-true on a CPU
    "were 4 % off",                # fp8-delayed gradients under recomputation
    "30 and 40 times", "about 3 such batches/s",  # loader against training, contradicted by the speed files
    "68 s with 2 CPU threads", "146 s when every SNV",  # mutations on a CPU
    "fp32 masters 37 %", "~1,860 kernels per step", "~1,900 kernels",  # a step profile that was not kept
    "~12 % of the GPU time at 4,096", "74.7k", "dense 692k, moe 497k", "69.6 ms against 50.9",
)
"""Figures that were quoted without a results file; they must not come back without one."""


def test_every_marked_table_is_what_its_results_files_render():
    assert stale_tables(ROOT) == []


def test_every_table_is_shown_and_every_shown_table_is_known():
    shown = marked_tables(ROOT)
    assert set(shown) == set(TABLES)
    assert "README.md" in shown["bench-sweep"]


def test_headline_figures_in_prose_are_what_their_files_hold():
    assert headline_problems(ROOT) == []
    for h in HEADLINES:  # every source exists in the repository, so the check above read it
        for source in h.sources:
            assert (ROOT / source).is_file(), source


def test_figures_without_a_file_stay_out_of_readme_and_docs():
    for doc in docs_tables.documents(ROOT):
        text = doc.read_text()
        assert not [f for f in NO_FILE_BEHIND_THEM if f in text], doc


CPU_TABLES = {"quality-markov-orders", "corpus-packing"}
"""Tables of work that ran on a CPU (a Markov fit, a data-module setup): they name the CPU, no GPU."""


def test_each_rendered_table_names_its_machine_date_and_files():
    for name, spec in TABLES.items():
        text = docs_tables.render(name, ROOT)
        machine = ("CPU" in text and "NVIDIA" not in text) if name in CPU_TABLES else "NVIDIA" in text
        assert machine and "2026-" in text, name
        for source in spec.sources:
            assert f"`{source}`" in text, (name, source)


@pytest.fixture
def copy_of_repo(tmp_path: Path) -> Path:
    """README, docs and the results the tables read, copied: the checks run on files they may change."""
    return copy_of(["README.md", "docs", *{s for t in TABLES.values() for s in t.sources},
                    *{h.source for h in HEADLINES}], tmp_path)


def test_a_table_edited_by_hand_or_a_changed_file_is_caught(copy_of_repo):
    readme = copy_of_repo / "README.md"
    text = readme.read_text()
    cell = "575.4k (1.24×"
    assert cell in text
    readme.write_text(text.replace(cell, "611.0k (1.31×"))
    assert stale_tables(copy_of_repo) == ["README.md: table:bench-sweep"]
    readme.write_text(text)
    report_path = copy_of_repo / "results/bench/sweep/small-shapes.json"
    report = json.loads(report_path.read_text())
    for record in report["records"]:
        if record["contender"] == "hf-bf16-fused" and record["shape"] == "genome":
            record["tokens_per_s"] *= 2
    report_path.write_text(json.dumps(report))
    assert "README.md: table:bench-sweep" in stale_tables(copy_of_repo)


def test_a_quoted_figure_that_disagrees_with_its_file_is_caught(copy_of_repo):
    summary = copy_of_repo / "results/quality/run-summaries/ecoli-mutation.repeat-mix.json"
    data = json.loads(summary.read_text())
    data["mixed_bits_per_base"] = 1.79
    summary.write_text(json.dumps(data))
    assert any("1.790" in p for p in headline_problems(copy_of_repo))


def test_the_faster_hf_row_is_the_baseline_of_the_single_run_table():
    text = docs_tables.render("bench-single-run", ROOT)
    row = next(line for line in text.splitlines() if line.startswith("| mixtral-2layer, 16,384"))
    assert "| 78.2k | 85.4k | 85.7k (1.00×) |" in row  # HF eager 85.4k beat grouped_mm 78.2k in that run


def test_a_missing_file_or_marker_is_one_line(copy_of_repo, capsys, monkeypatch):
    (copy_of_repo / "results/bench/bench.json").unlink()
    with pytest.raises(DocsTableError, match=r"^docs/benchmarks.md: results/bench/bench.json: no such results"):
        stale_tables(copy_of_repo)
    with pytest.raises(DocsTableError, match="without its"):
        rendered_text("<!-- table:bench-sweep -->\nno end\n", "x.md", copy_of_repo)
    with pytest.raises(DocsTableError, match="table:nope: no such table"):
        rendered_text("<!-- table:nope -->\n<!-- /table -->\n", "x.md", copy_of_repo)
    monkeypatch.setattr(docs_tables, "ROOT", copy_of_repo)
    assert main(["--check"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("docs-tables: error: ") and "Traceback" not in err


def test_rendering_writes_only_documents_whose_tables_changed(copy_of_repo, monkeypatch):
    monkeypatch.setattr(docs_tables, "ROOT", copy_of_repo)
    readme = copy_of_repo / "README.md"
    before = {p: p.stat().st_mtime_ns for p in docs_tables.documents(copy_of_repo)}
    readme.write_text(readme.read_text().replace("575.4k (1.24×", "1.0k (9.99×"))
    assert main([]) == 0
    assert stale_tables(copy_of_repo) == [] and "575.4k (1.24×" in readme.read_text()
    assert all(p.stat().st_mtime_ns == t for p, t in before.items() if p != readme)


def _sweep_report(path: str, gpu: str, shapes: set[str]):
    from bench.docs_tables.report import Report

    data = json.loads((ROOT / "results/bench/sweep/small-shapes.json").read_text())
    data["environment"] = {**data["environment"], "gpu": gpu, "date": "2026-12-07"}
    data["records"] = [r for r in data["records"] if r["shape"] in shapes]
    return Report(path, data)


def test_a_sweep_assembled_from_runs_on_two_machines_names_each_files_machine():
    from bench.docs_tables.training import sweep_headline

    text = sweep_headline([_sweep_report("a.json", "NVIDIA H100 80GB HBM3", {"genome"}),
                           _sweep_report("b.json", "NVIDIA H200", {"dna-small"})])
    footer = text.splitlines()[-1]
    assert "`a.json` (genome@65536): one NVIDIA H100 80GB HBM3" in footer
    assert "`b.json` (dna-small@16384): one NVIDIA H200" in footer
    assert text.count("| genome, 65,536") == 1 and text.count("| dna-small, 16,384") == 1


def test_a_sweep_refuses_a_shape_that_two_of_its_files_hold():
    from bench.docs_tables.training import sweep_headline

    with pytest.raises(DocsTableError, match=r"^b.json: shape genome@65536 is also in a.json; a sweep reads each"):
        sweep_headline([_sweep_report("a.json", "NVIDIA H100 80GB HBM3", {"genome"}),
                        _sweep_report("b.json", "NVIDIA H200", {"genome", "dna-small"})])


def test_a_figure_quoted_from_a_profiler_table_is_checked_against_the_table(copy_of_repo):
    profile = copy_of_repo / "results/bench/bare-loop/profile-mixtral-2layer.txt"
    text = profile.read_text()
    assert "aten::_grouped_mm" in text
    profile.write_text(text.replace("73.492ms", "93.492ms"))  # the profiled contender's expert GEMMs
    problems = headline_problems(copy_of_repo)
    assert any("24.5 ms of bf16 grouped GEMMs" in p and "31.2 ms" in p for p in problems)
    assert any("≈700 TFLOP/s" in p and "≈600 TFLOP/s" in p for p in problems)
