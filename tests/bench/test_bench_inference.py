"""The bench's inference rows on a CPU: a tiny network, a tiny genome, one run of each contender.

Checks the records (fields, positive rates, one run each), that HF scored exactly what the
command scored (same weights, same windows), and the flags of ``python -m bench``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench.inference import InferenceSettings, network_config, plan_inference, run_inference
from bench.inference_cli import parse_report
from bench.run import main
from conftest import random_dna

TINY = """model:
  config:
    vocab_size: 64
    hidden_size: 32
    num_layers: 2
    num_heads: 4
    num_kv_heads: 2
    num_experts: 4
    top_k: 2
    ffn_hidden_size: 64
"""


@pytest.fixture
def tiny_inputs(tmp_path: Path, write_fasta) -> tuple[Path, Path]:
    net = tmp_path / "tiny-net.yaml"
    net.write_text(TINY)
    fasta = write_fasta({"chr1": random_dna(1500, seed=1), "chr2": random_dna(700, seed=2) + "NNNN" + "ACGT" * 20},
                        name="tiny.fa.gz", compression="gzip")
    return net, fasta


def test_inference_rows_on_cpu_in_process(tmp_path, tiny_inputs, one_thread):
    net, fasta = tiny_inputs
    settings = InferenceSettings(device=torch.device("cpu"), networks=[str(net)], fasta=fasta, repeats=1,
                                 length=8, samples=[3, 1], variants=16, window=128, pool_size=100,
                                 work_dir=tmp_path, fresh_process=False)
    report = run_inference(settings, tmp_path / "out", "python -m bench --inference-only", {},
                           log=lambda line: None)
    have_hf = _has_transformers()
    records = {(r["task"], r["contender"]): r for r in report["records"]}
    tasks = ["score-fasta", "embed", "score-variants", "generate-3", "generate-1"]
    assert [t for t, c in records if c == "biomoe"] == tasks
    for (task, contender), r in records.items():
        assert r["status"] == "ok", (task, contender, r["error"])
        assert r["network"] == "tiny-net" and r["unit"] in ("bases/s", "variants/s")
        assert len(r["runs"]) == 1 and r["rate"] > 0 and r["wall_rate"] > 0
        assert r["rate_min"] <= r["rate"] <= r["rate_max"]
        assert r["tflops"] > 0 and r["peak_mem_gb"] is None  # no CUDA here
        for run in r["runs"]:
            assert run["seconds"] > 0 and run["work"] > 0
    bases = report["genome"]["bases"]
    assert records["score-fasta", "biomoe"]["work"] == bases == 1500 + 704 + 80
    assert records["score-variants", "biomoe"]["work"] == 16
    assert records["generate-3", "biomoe"]["work"] == 3 * 8
    assert records["generate-1", "biomoe"]["steps_per_s"] > 0
    argv = records["embed", "biomoe"]["details"]["argv"]
    assert argv[:2] == ["cli.py", "embed"] and "--pool" in argv and "window" in argv
    if have_hf:
        assert {c for _, c in records} == {"biomoe", "hf"}
        for task in tasks:
            bio, hf = records[task, "biomoe"], records[task, "hf"]
            assert bio["ratio_vs_hf"] == pytest.approx(bio["rate"] / hf["rate"])
            assert bio["basis"] == hf["basis"] and bio["work"] == hf["work"]
        # the same weights and windows on both sides: the same numbers (fp32 on a CPU)
        ll = records["score-fasta", "biomoe"]["details"]["log_likelihood"]
        assert records["score-fasta", "hf"]["details"]["log_likelihood"] == pytest.approx(ll, rel=1e-4)
        llr = records["score-variants", "biomoe"]["details"]["mean_llr"]
        assert records["score-variants", "hf"]["details"]["mean_llr"] == pytest.approx(llr, rel=1e-3, abs=1e-4)
    saved = json.loads((tmp_path / "out" / "inference.json").read_text())
    assert len(saved["records"]) == len(report["records"])
    markdown = (tmp_path / "out" / "inference.md").read_text()
    assert "python -m bench --inference-only" in markdown and "| score-fasta | biomoe |" in markdown
    assert not list(tmp_path.glob("biomoe-bench-inference-*"))  # the scratch folder is removed


@pytest.mark.slow
def test_each_run_is_a_fresh_process_timed_cold_then_warm(tmp_path, tiny_inputs):
    """As users run them: ``python cli.py score-fasta ...`` and the HF job each in a new process,
    the first run recorded as cold, the warm runs after it; the two still score the same windows."""
    net, fasta = tiny_inputs
    settings = InferenceSettings(device=torch.device("cpu"), networks=[str(net)], tasks=["score-fasta"],
                                 fasta=fasta, repeats=2, window=128, work_dir=tmp_path)
    assert settings.fresh_process  # the default
    report = run_inference(settings, tmp_path / "out", "python -m bench --inference-only", {},
                           log=lambda line: None)
    records = {r["contender"]: r for r in report["records"]}
    bio = records["biomoe"]
    assert bio["status"] == "ok" and len(bio["runs"]) == 2
    assert bio["cold_seconds"] > 0 and bio["cold_rate"] == pytest.approx(bio["work"] / bio["cold_seconds"])
    # a new interpreter each run: start-up and imports are inside every run's wall time
    assert all(run["seconds"] > 0.5 for run in bio["runs"])
    assert bio["details"]["argv"][:2] == ["cli.py", "score-fasta"]
    assert "new process" in report["timing"]
    if _has_transformers():
        hf = records["hf"]
        assert hf["status"] == "ok" and hf["cold_seconds"] > 0 and len(hf["runs"]) == 2
        assert hf["details"]["argv"][:3] == ["python", "-m", "bench.inference_hf_job"]
        assert hf["details"]["log_likelihood"] == pytest.approx(bio["details"]["log_likelihood"], rel=1e-4)
    markdown = (tmp_path / "out" / "inference.md").read_text()
    assert "cold wall" in markdown


def _has_transformers() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def test_networks_are_read_from_the_shipped_configs():
    label, config, runtime = network_config("genome")
    assert label == "genome" and config["hidden_size"] > 0 and "expert_backend" in runtime
    assert network_config("dna-small")[1]["num_layers"] > 0
    with pytest.raises(ValueError):
        network_config("no-such-network")


def test_plan_and_flags(tmp_path, capsys, tiny_inputs):
    net, fasta = tiny_inputs
    ids = plan_inference(InferenceSettings(torch.device("cpu"), [str(net)], samples=[64, 1]))
    assert ids[:2] == ["tiny-net/score-fasta/biomoe", "tiny-net/score-fasta/hf"]
    assert "tiny-net/generate-64/biomoe" in ids and len(ids) == 10
    assert main(["--inference-only", "--list", "--inference-networks", str(net), "--device", "cpu"]) == 0
    listed = capsys.readouterr().out.split()
    assert listed and all(line.startswith("inference:") for line in listed)
    assert main(["--inference", "--list", "--quick", "--inference-networks", str(net), "--device", "cpu"]) == 0
    listed = capsys.readouterr().out.split()
    assert any(not line.startswith("inference:") for line in listed) and "inference:tiny-net/embed/hf" in listed
    assert main(["--inference-only", "--list", "--inference-tasks", "nope", "--device", "cpu"]) == 2
    capsys.readouterr()


def test_reports_on_stderr_are_parsed():
    line = "generated 128,000 bases in 3.20 s (40,000 bases/s, 625 steps/s)"
    report = parse_report("note\n" + line + "\n")
    assert (report.bases, report.seconds, report.steps_per_s) == (128000, 3.2, 625.0)
    report = parse_report("scored 4,938,920 bases in 5.21 s (0.948 Mbp/s)\n")
    assert (report.bases, report.seconds, report.steps_per_s) == (4938920, 5.21, None)
    report = parse_report("scored 2,048 variants in 2.00 s (1,024 variants/s)\n")
    assert (report.bases, report.seconds) == (2048, 2.0)
    assert parse_report("wrote out.tsv\n") is None
    # the first batch timed apart: the whole run's steps/s, not the steady one, is the reported one
    report = parse_report("generated 128,000 bases in 3.20 s: 45,000 bases/s, 700 steps/s after the first step "
                          "(first step 128 bases in 0.40 s, includes warm-up; 40,000 bases/s, 625 steps/s over the "
                          "whole run)\n")
    assert (report.bases, report.seconds, report.steps_per_s) == (128000, 3.2, 625.0)
    assert (report.first_bases, report.first_seconds) == (128, 0.4)
    report = parse_report("scored 4,100,000 bases in 6.80 s: 1.37 Mbp/s after the first batch (first batch 262,144 "
                          "bases in 4.00 s, includes warm-up; 0.60 Mbp/s over the whole run)\n")
    assert (report.bases, report.seconds, report.first_bases, report.first_seconds) == (4100000, 6.8, 262144, 4.0)
    report = parse_report("scored 100 bases in 0.05 s: 2.0 kbp/s in one batch (includes warm-up)\n")
    assert (report.bases, report.seconds, report.first_seconds) == (100, 0.05, None)


def test_steady_rate_leaves_the_first_batch_out():
    from types import SimpleNamespace

    import yaml

    from bench.inference import InferenceRecord, _summarise

    config = yaml.safe_load(TINY)["model"]["config"]
    task = SimpleNamespace(samples=None, context=1024, tokens_per_unit=1.0)
    record = InferenceRecord("tiny-net", "score-fasta", "biomoe", "bases/s", basis="compute")
    runs = [{"seconds": 10.0, "compute_seconds": 6.8, "work": 4_100_000, "first_batch_seconds": 4.0,
             "first_batch_work": 262_144}]
    _summarise(record, runs, task, config)
    assert record.compute_rate == pytest.approx(4_100_000 / 6.8)  # the whole run, first batch included
    assert record.steady_rate == pytest.approx((4_100_000 - 262_144) / 2.8)
    record = InferenceRecord("tiny-net", "score-fasta", "hf", "bases/s", basis="compute")
    _summarise(record, [{"seconds": 10.0, "compute_seconds": 6.8, "work": 4_100_000}], task, config)
    assert record.steady_rate is None and record.compute_rate == pytest.approx(4_100_000 / 6.8)


def test_kernel_contenders_are_timed_against_the_same_hf_runs(tmp_path, tiny_inputs, one_thread):
    """``--inference-kernels default,torch``: one row per kernel set, each command told its kernels
    on its command line, both against one HF side; on a CPU both compute the same scores."""
    net, fasta = tiny_inputs
    settings = InferenceSettings(device=torch.device("cpu"), networks=[str(net)], tasks=["score-fasta"],
                                 fasta=fasta, repeats=1, window=128, work_dir=tmp_path, kernels=["default", "torch"],
                                 fresh_process=False)
    assert plan_inference(settings) == ["tiny-net/score-fasta/biomoe", "tiny-net/score-fasta/biomoe-torch",
                                        "tiny-net/score-fasta/hf"]
    report = run_inference(settings, tmp_path / "out", "python -m bench --inference-only", {},
                           log=lambda line: None)
    records = {r["contender"]: r for r in report["records"]}
    default, torch_kernels = records["biomoe"], records["biomoe-torch"]
    assert default["status"] == torch_kernels["status"] == "ok"
    assert "--attention-backend" not in default["details"]["argv"]
    argv = torch_kernels["details"]["argv"]
    assert argv[argv.index("--attention-backend") + 1] == "torch" and argv[argv.index("--norm-backend") + 1] == "torch"
    assert torch_kernels["details"]["log_likelihood"] == pytest.approx(default["details"]["log_likelihood"], rel=1e-6)
    if _has_transformers():
        assert default["ratio_vs_hf"] and torch_kernels["ratio_vs_hf"]
    assert "(biomoe-torch)" in (tmp_path / "out" / "inference.md").read_text()
    with pytest.raises(ValueError, match="--inference-kernels"):
        plan_inference(InferenceSettings(torch.device("cpu"), [str(net)], kernels=["cudnn"]))
