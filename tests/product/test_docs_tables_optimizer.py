"""The optimizer tables are what their reports hold: a changed figure changes the table, a missing
row is a one-line error naming its file, and no ratio crosses two runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.repo_copy import ROOT, copy_of, edit_json
from tests.helpers.table_rows import row, scale

from bench.docs_tables import DocsTableError, render
from bench.docs_tables import optimizer as opt


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """A copy of every results file the optimizer tables read, free to change."""
    return copy_of({s for t in opt.TABLES.values() for s in t.sources}, tmp_path)


def test_each_storage_row_is_against_the_hf_row_of_its_own_file(results):
    text = render("optimizer-master-storage", results)
    assert "| 82.7k (1.07×) | 53.6 (1.81×) | 52.3k (0.84×) | 46.1 (2.03×) | `sweep/mixtral.json` |" in text
    assert "| 80.0k (1.04×) | 48.1 (1.63×) |" in row(text, "| `master_storage: remainder`")
    edit_json(results, opt.SWEEP_MIXTRAL, scale(16384, "hf-bf16-fused", 2))
    text = render("optimizer-master-storage", results)
    assert "82.7k (0.54×)" in row(text, "| full fp32 master")
    assert "80.0k (1.04×)" in row(text, "| `master_storage: remainder`")  # the other file's HF did not move


def test_the_strategy_row_is_against_the_same_fit_of_its_run(results):
    text = render("optimizer-master-storage-strategy", results)
    assert "79.0k (1.03×; 98.7 % of the fit without it)" in text
    edit_json(results, opt.STORAGE, scale(4096, "biomoe-cli-ep", 0.5))
    assert "22.9k (0.36×; 48.6 % of the fit without it)" in render("optimizer-master-storage-strategy", results)


def test_the_compiled_fit_reads_its_run_counts_and_spread_from_the_files(results):
    text = render("optimizer-compiled-fit", results)
    assert "| `backend: compiled`, `master_storage: remainder` | 93.7k | 1.17× | 48.1 | 69.9k | 1.11× | 40.5 |" in text
    assert "2 runs (of 3 asked) per row at 4,096 tokens, every run within 1.5 %" in text

    def one_run(data: dict[str, Any]) -> None:
        for r in data["records"]:
            r["runs"] = r["runs"][:1]
    edit_json(results, opt.COMPILED_4K, one_run)
    edit_json(results, opt.COMPILED_16K, scale(16384, "biomoe-cli-compiled-all", 1.1))
    text = render("optimizer-compiled-fit", results)
    assert "1 run (of 3 asked) per row at 4,096 tokens" in text
    assert "| 109.8k | 1.38× | 52.0 |" in row(text, "| `backend: compiled` and")
    detail = render("optimizer-compiled-fit-detail", results)
    assert "| 85,637 | 1.07× | 191.3 | 53.5 (1.82×) | 753 |" in row(detail, "| 16,384 | TE `FusedAdam`")


def test_a_missing_baseline_is_one_line_naming_the_file(results):
    def drop_hf(data: dict[str, Any]) -> None:
        data["records"] = [r for r in data["records"] if r["contender"] != "hf-bf16-fused"]
    edit_json(results, opt.COMPILED_4K, drop_hf)
    with pytest.raises(DocsTableError, match=r"^results/bench/compiled-adamw/mixtral-4k.json: no measured "
                                             r"mixtral-2layer@4096/hf-bf16-fused/bf16 row$"):
        render("optimizer-compiled-fit", results)


def test_the_optimizer_step_table_shows_both_runs_of_the_file(results):
    text = render("optimizer-step", results)
    assert "| compiled, fp32 masters, fp32 moments | 28 | 20.74 (20.09–20.78) | 3.92 | — | — |" in text
    assert "| 14 | — | — | 37.71 (37.68–37.73) | 1.08 |" in row(text, "| torch AdamW foreach")

    def slower(data: dict[str, Any]) -> None:
        data["runs"][0]["rows"][-1].update(ms=30.0, tb_per_s=2.71)
    edit_json(results, opt.OPTIMIZER_STEP, slower)
    assert "| 28 | 30.00 (20.09–20.78) | 2.71 |" in render("optimizer-step", results)
    edit_json(results, opt.OPTIMIZER_STEP, lambda data: data.pop("runs"))
    with pytest.raises(DocsTableError, match=r"^results/bench/compiled-adamw/optimizer-step.json: not an "
                                             r"optimizer-step report \(no 'runs'\)$"):
        render("optimizer-step", results)


def test_the_loop_profile_is_read_from_the_profiler_table_in_the_report(results):
    steps, total, ops = opt.parse_profile(json.loads((ROOT / opt.STORAGE).read_text())["profiles"]["biomoe-loop"])
    assert (steps, total, ops["aten::_grouped_mm"]) == (3, 509.83, 306.194)
    text = render("optimizer-loop-profile", results)
    assert "| 102.1 | 60 % |" in row(text, "| expert grouped GEMMs")
    assert "679 TFLOP/s: 69.3 TFLOP per step" in text and "86 % of the 790 TFLOP/s" in text

    def twice_the_total(data: dict[str, Any]) -> None:
        data["profiles"]["biomoe-loop"] = data["profiles"]["biomoe-loop"].replace(
            "Self CUDA time total: 509.830ms", "Self CUDA time total: 1.020s")
    edit_json(results, opt.STORAGE, twice_the_total)
    assert "| 102.1 | 30 % |" in row(render("optimizer-loop-profile", results), "| expert grouped GEMMs")
    edit_json(results, opt.STORAGE, lambda data: data.pop("profiles"))
    with pytest.raises(DocsTableError, match=r"^results/bench/optimizer-storage/bench.json: no biomoe-loop profile"):
        render("optimizer-loop-profile", results)
