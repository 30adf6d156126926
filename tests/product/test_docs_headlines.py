"""The headline figures of README.md and docs/ are checked against their results files: a changed
value, a reworded quote or a missing file is reported, on copies of the documents and files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.repo_copy import copy_of, edit_json

from bench.docs_headlines import (HEADLINES, ROOT, Headline, HeadlineSourceError, benchmarks, commands, corpus, gpus,
                                  headline_problems, mutations, quality, readme, recipes, scaling)

MODULES = {"README.md": readme, "docs/benchmarks.md": benchmarks, "docs/quality.md": quality,
           "docs/recipes.md": recipes, "docs/scaling.md": scaling, "docs/gpus.md": gpus,
           "docs/mutations.md": mutations, "docs/commands.md": commands, "docs/corpus.md": corpus}


@pytest.fixture
def copy_of_repo(tmp_path: Path) -> Path:
    """README, docs and every file a headline reads, copied: the checks run on files they may change."""
    return copy_of(["README.md", "docs", *{source for h in HEADLINES for source in h.sources}], tmp_path)



def headline(quote: str) -> Headline:
    return next(h for h in HEADLINES if h.quote == quote)


def test_each_document_module_quotes_its_own_document_and_all_are_checked():
    assert HEADLINES == tuple(h for module in MODULES.values() for h in module.HEADLINES)
    for document, module in MODULES.items():
        assert module.HEADLINES and {h.document for h in module.HEADLINES} == {document}
    assert headline_problems(ROOT) == []


def test_a_changed_value_in_a_results_file_is_reported(copy_of_repo):
    def hf_uses_more_memory(data: Any) -> None:
        for record in data["records"]:
            if (record["contender"], record["tokens_per_step"], record["precision"]) == ("hf-bf16-fused", 4096, "bf16"):
                record["peak_mem_gb"] = 30.0

    def species_differ_more(data: Any) -> None:
        data["specificity"]["mean_between_species_jsd_bits"] = 0.0704

    memory, routing = (headline("at 1.8–2.0× HF's memory"),
                       headline("0.0009 bits within a species and 0.060 bits between"))
    edit_json(copy_of_repo, memory.source, hf_uses_more_memory)
    edit_json(copy_of_repo, routing.source, species_differ_more)
    problems = headline_problems(copy_of_repo)
    assert problems == [
        f"docs/benchmarks.md: {memory.quote!r} but {memory.source} gives 1.5–1.8×",
        f"docs/recipes.md: {routing.quote!r} but {routing.source} gives "
        "0.0009 bits within a species and 0.070 bits between",
    ]


def test_a_changed_point_of_a_scaling_report_is_reported(copy_of_repo):
    def faster_full_depth(data: Any) -> None:
        for point in data["results"]:
            if (point["layers"], point["layout"]) == (32, "dp1xep4"):
                point["tflops_per_gpu"] = 201.2

    flops = headline("that is 185 TFLOP/s per GPU")
    edit_json(copy_of_repo, flops.source, faster_full_depth)
    assert headline_problems(copy_of_repo) == [f"docs/scaling.md: {flops.quote!r} but {flops.source} gives 201 TFLOP/s"]


def test_a_reworded_quote_is_reported(copy_of_repo):
    doc = copy_of_repo / "docs/quality.md"
    doc.write_text(doc.read_text().replace("moe 410k (0.81x)", "moe 411k (0.81x)"))
    assert headline_problems(copy_of_repo) == [
        "docs/quality.md: no longer quotes 'moe 410k (0.81x)' (update HEADLINES)"]


def test_a_missing_or_broken_results_file_is_one_line(copy_of_repo):
    source = headline("(exact matches 1.8099 → 1.7909 there)").source
    (copy_of_repo / source).write_text("{not json")
    with pytest.raises(HeadlineSourceError, match=rf"^{source}: not JSON \(.*line 1\)$"):
        headline_problems(copy_of_repo)
    (copy_of_repo / source).unlink()
    with pytest.raises(HeadlineSourceError, match=rf"^{source}: no such results file$"):
        headline_problems(copy_of_repo)


def test_the_study_cost_to_reach_dense_follows_the_runs_training_time(copy_of_repo):
    def moe_trains_slower(data: Any) -> None:
        for contender in data["contenders"]:
            if contender["name"] == "base-moe":
                contender["seconds"] = [[tokens, seconds * 1.2] for tokens, seconds in contender["seconds"]]

    gpu_time = "with 0.73x the tokens and **0.91x the GPU time**"
    edit_json(copy_of_repo, "results/experts/study/summary.json", moe_trains_slower)
    assert headline_problems(copy_of_repo) == [  # benchmarks.md quotes the same figure, and its cost on quack
        "docs/benchmarks.md: 'with 0.91x its GPU time on `grouped`' but results/experts/study/summary.json gives 1.09x",
        "docs/benchmarks.md: 'step rate that is 0.82x' but results/experts/study/summary.json and "
        "results/experts/speed-quack/speed.json give 0.99x",
        f"docs/quality.md: {gpu_time!r} but results/experts/study/summary.json gives 0.73x the tokens and **1.09x"]


def test_a_figure_computed_across_two_files_follows_each_of_them(copy_of_repo):
    def quack_runs_faster(data: Any) -> None:
        for contender in data["contenders"]:
            if (contender["variant"], contender["kernels"]) == ("fine", "quack"):
                contender["tokens_per_s"] *= 1.25

    edit_json(copy_of_repo, "results/experts/speed-quack/speed.json", quack_runs_faster)
    assert headline_problems(copy_of_repo) == [  # the speed ratio itself, and the study's cost on quack
        "docs/benchmarks.md: 'the 8-expert MoE 1.10x, the fine-grained 1.17x' but "
        "results/experts/speed-quack/speed.json gives the 8-expert MoE 1.10x, the fine-grained 1.46x",
        "docs/benchmarks.md: 'become 1.17x and 1.28x' but results/experts/study/summary.json and "
        "results/experts/speed-quack/speed.json give 0.94x and 1.02x"]
