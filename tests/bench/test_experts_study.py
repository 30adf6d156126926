"""The MoE-against-dense study runner: equal active parameters per variant, the subset that travels,
and the report's grouping of per-genome validation curves by corpus split."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest

from bench import expert_contenders, experts
from biomoe.model.config import ModelConfig


def active_mlp_params(cfg: ModelConfig) -> int:
    """MLP weights one token passes through in one block (SwiGLU: 3 matrices)."""
    if cfg.moe_layer_ids:
        return 3 * cfg.hidden_size * (cfg.top_k * cfg.ffn_hidden_size + cfg.shared_expert_size)
    return 3 * cfg.hidden_size * cfg.dense_ffn_size


@pytest.mark.parametrize("size", sorted(expert_contenders.SIZES))
@pytest.mark.parametrize("variant", ["moe", "dense", "top1", "fine", "fine64", "auxfree", "shared"])
def test_every_variant_has_the_active_parameters_of_the_dense_model(size: str, variant: str) -> None:
    base = dict(expert_contenders.SIZES[size], vocab_size=64, num_layers=2)
    dense = ModelConfig(**{**base, **expert_contenders.variant_settings("dense", base["ffn_hidden_size"])})
    other = ModelConfig(**{**base, **expert_contenders.variant_settings(variant, base["ffn_hidden_size"])})
    assert active_mlp_params(other) == active_mlp_params(dense)
    assert bool(other.moe_layer_ids) == (variant != "dense")


def test_unknown_variant_is_one_line() -> None:
    with pytest.raises(SystemExit, match="unknown variant 'switch'"):
        expert_contenders.variant_settings("switch", 1024)


def test_subset_caps_training_genomes_and_spreads_held_out_pieces(tmp_path: Path) -> None:
    fasta = tmp_path / "g.fa"
    fasta.write_text(">a\n" + "A" * 5000 + "\n>b desc\n" + "C" * 5000 + "\n")
    train = experts.subset_file(fasta, held_out=False, train_bases=7000, heldout_bases=0)
    assert train.replace("\n", "").replace(">a", "").replace(">b desc", "") == "A" * 5000 + "C" * 2000
    held = experts.subset_file(fasta, held_out=True, train_bases=0, heldout_bases=3000, piece=1000)
    names = [line for line in held.splitlines() if line.startswith(">")]
    assert len(names) == 3
    assert names[0] == ">a:1-1000" and names[-1] == ">b:4001-5000"  # first and last piece of the genome


def test_report_groups_genomes_by_split(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "base-moe"
    (run / "version_0").mkdir(parents=True)
    (run / "command.txt").write_text("cli.py fit --data.fasta s\n")
    (run / "version_0" / "config.yaml").write_text("data:\n  batch_size: 4\n  seq_length: 100\n")
    keys = ["step", "train/tokens_per_s", "val/seen1/bits_per_base", "val/seen2/bits_per_base",
            "val/strain/bits_per_base", "val/species/bits_per_base"]
    with (run / "version_0" / "metrics.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, keys)
        writer.writeheader()
        writer.writerow({"step": 9, "train/tokens_per_s": 1000.0})
        writer.writerow({"step": 9, "val/seen1/bits_per_base": 1.9, "val/seen2/bits_per_base": 1.7,
                         "val/strain/bits_per_base": 1.95, "val/species/bits_per_base": 1.99})
    splits = {"seen1.fa": "train", "seen2.fa": "train", "strain.fa": "heldout-strain", "species.fa": "heldout-species"}
    c = experts.read_contender(run, splits)
    assert c.final == pytest.approx({"seen species": 1.8, "held-out strains": 1.95, "held-out species": 1.99})
    assert c.curve["seen species"][0][0] == 10 * 400  # tokens after step index 9
    assert c.tokens_per_s == 1000.0
    json.dumps(experts.asdict(c))


def test_report_compares_at_equal_tokens_and_counts_tokens_to_dense() -> None:
    moe = experts.Contender("base-moe", 100, curve={"held-out strains": [(100, 1.9), (200, 1.8), (300, 1.7)]})
    dense = experts.Contender("base-dense", 100, curve={"held-out strains": [(100, 1.95), (200, 1.85)]})
    assert experts.at_tokens(moe, "held-out strains", 200) == 1.8
    assert experts.tokens_to_reach(moe, "held-out strains", 1.85) == 200
    table = experts.markdown([moe, dense], "cmd")
    assert "after 0.0M training tokens" in table  # the common point is 200 tokens, not moe's 300
    row = next(line for line in table.splitlines() if line.startswith("| base-moe"))
    assert "1.8000" in row and "1.7000" not in row
    assert "1.00x" in row  # moe reaches dense's 1.85 at 200 of 200 tokens


def test_report_names_a_contender_without_a_curve_and_reports_the_rest(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    good = runs / "base-moe"
    (good / "version_0").mkdir(parents=True)
    (good / "command.txt").write_text("cli.py fit --data.fasta s\n")
    (good / "version_0" / "config.yaml").write_text("data:\n  batch_size: 4\n  seq_length: 100\n")
    (good / "version_0" / "metrics.csv").write_text("step,val/strain/bits_per_base\n9,1.95\n")
    failed = runs / "4x-moe"
    failed.mkdir()
    (failed / "command.txt").write_text("cli.py fit --data.fasta s\n")
    (failed / "fit.log").write_text("starting\nbiomoe: error: CUDA out of memory\n")
    splits = tmp_path / "splits.tsv"
    splits.write_text("file\tsplit\nstrain.fa\theldout-strain\n")
    out = tmp_path / "report"
    assert experts.main(["report", str(runs), "--splits", str(splits), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert [c["name"] for c in summary["contenders"]] == ["base-moe"]
    assert summary["without_curve"] == ["4x-moe: no metrics (biomoe: error: CUDA out of memory)"]
    assert "4x-moe" in (out / "summary.md").read_text() and "4x-moe" in capsys.readouterr().err


def _speed_run(tmp: Path, model: dict, rates: list[tuple[int, float]], peak: float) -> Path:
    version = tmp / "version_0"
    version.mkdir(parents=True)
    with (version / "metrics.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, ["step", "train/tokens_per_s", "train/peak_memory_gib"])
        w.writeheader()
        for step, rate in rates:
            w.writerow({"step": step, "train/tokens_per_s": rate, "train/peak_memory_gib": peak})
    import yaml

    (version / "config.yaml").write_text(yaml.safe_dump({"model": {"config": model},
                                                         "data": {"seq_length": 1024}}))
    return tmp


def test_speed_reads_the_steady_rate_and_compares_each_model_with_its_dense_twin(tmp_path: Path) -> None:
    from bench.expert_speed import flops_per_token, read_run, summarise

    base = {"hidden_size": 512, "num_heads": 8, "num_kv_heads": 4, "ffn_hidden_size": 1024, "num_layers": 8,
            "vocab_size": 64, "num_experts": 8, "top_k": 2}
    dense_model = dict(base, moe_layers=[])
    # warm-up rates (the first half of the steps) are left out of the median
    dense = read_run(_speed_run(tmp_path / "d", dense_model, [(10, 1.0), (20, 5.0), (30, 600.0), (40, 700.0),
                                                               (50, 800.0)], 3.0))
    assert dense["tokens_per_s"] == 700.0 and dense["peak_memory_gib"] == 3.0
    moe = read_run(_speed_run(tmp_path / "m", base, [(10, 1.0), (30, 400.0), (40, 350.0)], 5.0))
    moe_again = read_run(_speed_run(tmp_path / "m2", base, [(10, 1.0), (30, 300.0), (40, 310.0)], 5.0))
    results = {"base-dense-torch": {"size": "base", "variant": "dense", "kernels": "torch", "command": "",
                                    "runs": [dense]},
               "base-moe-torch": {"size": "base", "variant": "moe", "kernels": "torch", "command": "",
                                  "runs": [moe, {"exit": 1}, moe_again]}}
    rows = {r["name"]: r for r in summarise(results, "NVIDIA H100 80GB HBM3")}
    assert rows["base-moe-torch"]["vs_dense"] == pytest.approx((375.0 + 305.0) / 2 / 700.0)  # median of two runs
    assert rows["base-moe-torch"]["tokens_per_s_range"] == [305.0, 375.0]  # the failed run is left out
    # equal active parameters: the same FLOPs per token, but for the router's gate
    cfg = ModelConfig(**dense_model)
    assert flops_per_token(dense_model, 1024) == 6.0 * cfg.active_params_per_token() + 6.0 * 8 * 512 * 1024
    assert flops_per_token(base, 1024) - flops_per_token(dense_model, 1024) == 6.0 * 8 * 512 * 8
    assert rows["base-dense-torch"]["mfu"] == pytest.approx(700.0 * flops_per_token(dense_model, 1024) / 1e12 / 989.0)


def test_power_law_fit_recovers_the_curve_and_projects_the_crossover() -> None:
    from bench.expert_curves import crossover, fit_power_law

    tokens = [1e7 * 2 ** i for i in range(9)]
    dense = [1.70 + 40.0 * t ** -0.30 for t in tokens]
    moe = [1.65 + 60.0 * t ** -0.30 for t in tokens]  # behind early, lower floor: overtakes later
    law = fit_power_law(tokens, dense, skip_first=0)
    assert law is not None and law.alpha == pytest.approx(0.30, abs=0.006) and law.E == pytest.approx(1.70, abs=2e-3)
    other = fit_power_law(tokens, moe, skip_first=0)
    # moe(T) = dense(T) where 20 T^-0.3 = 0.05: T = 400^(1/0.3)
    assert crossover(other, law, 1e7) == pytest.approx(400 ** (1 / 0.3), rel=0.02)
    assert crossover(other, law, 1e7, stop=1e8) is None  # still behind at 1e8 tokens
    # at equal GPU time a model twice as slow needs twice the seconds for the same tokens
    seconds = crossover(other, law, 1e3, moe_rate=5e5, dense_rate=1e6)
    assert seconds is not None and seconds * 5e5 > 400 ** (1 / 0.3)
    assert fit_power_law(tokens[:4], dense[:4]) is None  # three points after the first: no fit
    # a moe that leads early but has the higher floor never crosses over for good
    early = fit_power_law(tokens, [1.75 + 20.0 * t ** -0.30 for t in tokens], skip_first=0)
    assert early is not None and crossover(early, law, 1e7) is None


def _write_part(run: Path, version: int, rows: list[dict]) -> None:
    keys = ["step", "train/tokens_per_s", "train/seconds", "val/strain/bits_per_base", "val/species/bits_per_base"]
    folder = run / f"version_{version}"
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("data:\n  batch_size: 1\n  seq_length: 100\n")
    with (folder / "metrics.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, keys)
        writer.writeheader()
        writer.writerows(rows)


def test_report_reads_every_resumed_part_and_compares_at_equal_gpu_time(tmp_path: Path) -> None:
    splits = {"strain.fa": "heldout-strain", "species.fa": "heldout-species"}
    runs = tmp_path / "runs"
    for name, floor, rate in (("base-dense", 1.80, 2.0), ("base-moe", 1.79, 1.0)):
        run = runs / name
        run.mkdir(parents=True)
        (run / "command.txt").write_text("cli.py fit\n")
        points = [(step, floor + 2.0 * ((step + 1) * 100) ** -0.5) for step in (9, 19, 29, 39, 49, 59)]
        rows = [[{"step": s, "train/tokens_per_s": 100 * rate, "train/seconds": (s + 1) / rate},
                 {"step": s, "val/strain/bits_per_base": b, "val/species/bits_per_base": b + 0.1}] for s, b in points]
        flat = [r for pair in rows for r in pair]
        _write_part(run, 0, flat[:8])  # steps 9..39: the part stopped after step 39 ...
        _write_part(run, 1, flat[6:])  # ... and the resumed one logged step 39 again, then the rest
    dense = experts.read_contender(runs / "base-dense", splits)
    moe = experts.read_contender(runs / "base-moe", splits)
    assert [t for t, _ in dense.curve["held-out strains"]] == [1000, 2000, 3000, 4000, 5000, 6000]
    assert moe.seconds[-1] == (6000, 60.0) and dense.seconds[-1] == (6000, 30.0)
    table = experts.markdown([dense, moe], "cmd")
    row = next(line for line in table.splitlines() if line.startswith("| base-moe"))
    # the moe reaches dense's final bits/base at 4,000 of 6,000 tokens, but at half the speed in 40 of 30 s
    tokens_ratio, gpu_ratio = row.split(" | ")[4], row.split(" | ")[5]
    assert tokens_ratio.split(" / ")[0] == "0.67x" and gpu_ratio.split(" / ")[0] == "1.33x"
    assert "| base-moe | held-out strains |" in table and "L(T) = E + A·T^-α" in table
    experts.plot([dense, moe], tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_study_runs_each_contender_alone_and_resumes_after_the_deadline(tmp_path: Path, monkeypatch) -> None:
    """A fit stopped at the deadline (SIGTERM, exit 143) leaves the next contender unstarted; the
    same command again resumes it with --ckpt_path last and goes on; finished ones are skipped."""
    import sys

    from bench import expert_study

    behaviour = {"base-dense": "sleep", "base-moe": "ok"}
    seen: list[list[str]] = []

    def fake_args(size, variant, data, steps, evaluations, run_dir, extra):
        mode = behaviour[f"{size}-{variant}"]
        code = ("import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(143))\n"
                "time.sleep(30)\n") if mode == "sleep" else "pass\n"
        return [sys.executable, "-c", code, f"--name={size}-{variant}", *extra]

    real_popen = subprocess.Popen

    def recording_popen(cmd, **kwargs):
        seen.append(list(cmd))
        return real_popen(cmd, **kwargs)

    monkeypatch.setattr(expert_study, "contender_args", fake_args)
    monkeypatch.setattr(expert_study.subprocess, "Popen", recording_popen)
    out = tmp_path / "study"
    argv = ["study", "--data", "x", "--variants", "dense,moe", "--steps", "10", "--out", str(out),
            "--deadline", "2", "--min-start", "0.5"]
    assert experts.main(argv) == 0
    assert len(seen) == 1 and seen[0][-2:] == ["--ckpt_path", "last"]
    assert json.loads((out / "base-dense" / "parts.json").read_text())[0]["exit"] == 143
    assert not (out / "base-dense" / "done.json").exists() and not (out / "base-moe").exists()

    behaviour["base-dense"] = "ok"
    assert experts.main(argv) == 0
    assert [c[3] for c in seen[1:]] == ["--name=base-dense", "--name=base-moe"]
    assert len(json.loads((out / "base-dense" / "parts.json").read_text())) == 2
    assert (out / "base-dense" / "done.json").exists() and (out / "base-moe" / "done.json").exists()
    assert experts.main(argv) == 0 and len(seen) == 3  # all done: nothing runs


def test_report_compares_lowest_points_and_names_curves_that_rise_again() -> None:
    # dense falls to 1.70 at 300 tokens and rises again; moe keeps falling and reaches 1.70 at 400 tokens
    dense = experts.Contender("base-dense", 100, curve={
        "held-out species": [(100, 1.9), (200, 1.75), (300, 1.70), (400, 1.72), (500, 1.74)],
        "seen species": [(100, 1.9), (200, 1.8), (300, 1.79), (400, 1.80), (500, 1.81)]},
        seconds=[(t, t / 10) for t in (100, 200, 300, 400, 500)])
    moe = experts.Contender("base-moe", 100, curve={
        "held-out species": [(100, 1.95), (200, 1.80), (300, 1.74), (400, 1.70), (500, 1.69)],
        "seen species": [(100, 1.9), (200, 1.8), (300, 1.79), (400, 1.789), (500, 1.788)]},
        seconds=[(t, t / 5) for t in (100, 200, 300, 400, 500)])
    assert experts.best(dense, "held-out species") == (300, 1.70)
    table = experts.markdown([dense, moe], "cmd")
    # the dense model first reaches its own last value (1.74) at 300 tokens, so it is the 1.00x reference
    assert "1.00x" in next(line for line in table.splitlines() if line.startswith("| base-dense |"))
    lowest = [line for line in table.splitlines() if line.startswith("| base-moe") and "(" in line][0]
    # moe reaches dense's lowest 1.70 at 400 of dense's 300 tokens, in 80 s against 30 s
    assert "1.33x" in lowest and "2.67x" in lowest
    assert "base-dense seen species: 1.7900 at 0M tokens, 1.8100 at 0M" in table
    assert "base-moe seen species" not in table  # within the tolerance of its lowest


def test_power_law_fit_refuses_a_curve_with_no_floor_above_zero() -> None:
    from bench.expert_curves import fit_power_law

    tokens = [1e7 * 2 ** i for i in range(9)]
    falling_faster = [1.9 - 0.02 * i ** 2 for i in range(9)]  # accelerating drop: a schedule's decay, no power law
    assert fit_power_law(tokens, falling_faster) is None


def test_report_renders_again_from_its_summary(tmp_path: Path) -> None:
    dense = experts.Contender("base-dense", 100, curve={"held-out strains": [(100, 1.9), (200, 1.8)]},
                              seconds=[(100, 1.0), (200, 2.0)])
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"command": "the study", "machine": "a GPU", "contenders": [experts.asdict(dense)],
                                   "without_curve": []}))
    out = tmp_path / "again"
    assert experts.main(["report", str(summary), "--out", str(out)]) == 0
    text = (out / "summary.md").read_text()
    assert text.startswith("Machine: a GPU") and "the study" in text and "1.8000" in text
    assert json.loads((out / "summary.json").read_text())["contenders"][0]["curve"] == {
        "held-out strains": [[100, 1.9], [200, 1.8]]}
    (tmp_path / "bad.json").write_text("{}")
    assert experts.main(["report", str(tmp_path / "bad.json"), "--out", str(tmp_path / "bad")]) == 2
    assert experts.main(["report", str(tmp_path / "no-such-runs"), "--out", str(tmp_path / "bad")]) == 2
    before = summary.read_bytes()
    assert experts.main(["report", str(summary), "--out", str(tmp_path)]) == 2  # would write over its input
    assert summary.read_bytes() == before


def test_report_puts_a_later_study_beside_an_earlier_one(tmp_path: Path) -> None:
    def summary(name: str, contenders: list, command: str) -> Path:
        path = tmp_path / name / "summary.json"
        path.parent.mkdir()
        path.write_text(json.dumps({"command": command, "machine": "a GPU", "without_curve": [],
                                    "contenders": [experts.asdict(c) for c in contenders]}))
        return path

    curve = {"held-out strains": [(100, 1.9), (200, 1.8)]}
    first = summary("first", [experts.Contender("base-dense", 100, curve=curve),
                              experts.Contender("base-moe", 100, curve=curve)], "study one")
    again = {"held-out strains": [(100, 1.9), (200, 1.7)]}
    second = summary("second", [experts.Contender("base-fine", 100, curve=curve),
                                experts.Contender("base-moe", 100, curve=again)], "study two")
    out = tmp_path / "both"
    assert experts.main(["report", str(first), str(second), "--out", str(out)]) == 0
    merged = json.loads((out / "summary.json").read_text())
    assert [c["name"] for c in merged["contenders"]] == ["base-dense", "base-fine", "base-moe"]
    assert merged["contenders"][2]["curve"]["held-out strains"][-1] == [200, 1.7]  # the later run
    assert merged["command"] == "study one\nstudy two" and merged["machine"] == "a GPU"


def test_speed_merge_joins_the_runs_of_several_benches_and_refuses_mixed_gpus(tmp_path: Path) -> None:
    import json

    from bench.expert_speed import merged_results

    def bench_file(name: str, machine: str, rows: list[tuple[str, str, list[float]]], steps=80) -> Path:
        contenders = [{"name": f"base-{variant}-{kernels}", "size": "base", "variant": variant, "kernels": kernels,
                       "command": "fit", "runs": [{"tokens_per_s": r} for r in rates]}
                      for variant, kernels, rates in rows]
        path = tmp_path / name
        path.write_text(json.dumps({"command": f"bench {name}", "machine": machine, "steps": steps,
                                    "contenders": contenders}))
        return path

    first = bench_file("a.json", "H100", [("dense", "torch", [700.0, 710.0]), ("moe", "torch", [500.0])])
    second = bench_file("b.json", "H100", [("moe", "torch", [520.0, 530.0]), ("fine", "torch", [400.0])], 60)
    results, machine, commands, steps = merged_results([first, second])
    assert machine == "H100" and commands == ["bench a.json", "bench b.json"] and steps == [60, 80]
    assert [r["tokens_per_s"] for r in results["base-moe-torch"]["runs"]] == [500.0, 520.0, 530.0]
    assert set(results) == {"base-dense-torch", "base-moe-torch", "base-fine-torch"}
    # a table merged before (its steps a list) merges again with a new bench
    merged = bench_file("merged.json", "H100", [("moe", "torch", [500.0, 520.0])], [60, 80])
    third = bench_file("c.json", "H100", [("moe", "torch", [540.0])], 40)
    results, _, _, steps = merged_results([merged, third])
    assert steps == [40, 60, 80]
    assert [r["tokens_per_s"] for r in results["base-moe-torch"]["runs"]] == [500.0, 520.0, 540.0]
    other = bench_file("c.json", "H200", [("dense", "torch", [900.0])])
    with pytest.raises(SystemExit, match="different GPUs"):
        merged_results([first, other])
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(SystemExit, match="bad.json: not a speed.json"):
        merged_results([tmp_path / "bad.json"])


def test_speed_table_lists_sizes_kernels_and_variants_in_order_with_the_run_count() -> None:
    from bench.expert_contenders import VARIANTS, variant_settings
    from bench.expert_speed import KERNEL_ARGS, speed_markdown

    for variant in VARIANTS:
        variant_settings(variant, 1024)  # every listed variant is one the study can run
    # te: every layer component on TE; the experts on torch's grouped GEMM for torch and te alike (a
    # config's auto would take quack where it runs); quack: the layers on torch, the experts on quack
    for kernels, layers, expert_kernels in (("torch", "torch", "grouped"), ("te", "te", "grouped"),
                                            ("quack", "torch", "quack")):
        settings = dict(zip(KERNEL_ARGS[kernels][::2], KERNEL_ARGS[kernels][1::2]))
        assert settings.pop("--model.runtime.expert_backend") == expert_kernels
        assert set(settings.values()) == {layers} and len(settings) == 4, settings

    def row(size: str, variant: str, kernels: str, runs: int) -> dict:
        return {"size": size, "variant": variant, "kernels": kernels, "runs": [{"tokens_per_s": 1.0}] * runs,
                "tokens_per_s": 1000.0, "tokens_per_s_range": [900.0, 1100.0], "tflops": 1.0, "mfu": 0.1,
                "peak_memory_gib": 1.0}

    text = speed_markdown([row("4x", "moe", "torch", 2), row("base", "fine", "te", 3),
                           row("base", "dense", "te", 3), row("base", "moe", "torch", 1)], "GPU", "cmd")
    body = [line.split(" | ")[:4] for line in text.splitlines() if line.startswith("| base") or line.startswith("| 4x")]
    assert body == [["| base", "moe", "torch", "1"], ["| base", "dense", "te", "3"], ["| base", "fine", "te", "3"],
                    ["| 4x", "moe", "torch", "2"]]


def test_speed_bench_draws_every_measured_row_and_links_the_picture(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    import argparse
    import json

    from bench.expert_speed import _write, speed_plot

    def entry(size: str, variant: str, kernels: str, rates: list[float]) -> dict:
        model = {"hidden_size": 64, "num_heads": 4, "num_kv_heads": 2, "ffn_hidden_size": 128, "num_layers": 2,
                 "vocab_size": 64, "num_experts": 4, "top_k": 2} | ({"moe_layers": []} if variant == "dense" else {})
        return {"size": size, "variant": variant, "kernels": kernels, "command": "fit",
                "runs": [{"tokens_per_s": r, "peak_memory_gib": 1.0, "model": model, "seq_length": 256}
                         for r in rates]}

    results = {"base-dense-torch": entry("base", "dense", "torch", [900.0, 1000.0, 1100.0]),
               "base-moe-torch": entry("base", "moe", "torch", [700.0]),
               "4x-moe-te": entry("4x", "moe", "te", [300.0])}
    args = argparse.Namespace(machine="NVIDIA H100 80GB HBM3", command="bench", steps=60)
    out = tmp_path / "speed"
    text = _write(args, out, results)
    assert (out / "speed.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "](speed.png)" in text and (out / "speed.md").read_text() == text
    assert json.loads((out / "speed.json").read_text())["machine"] == "NVIDIA H100 80GB HBM3"
    # rows that all failed draw nothing (and the table links no picture)
    failed = {"base-moe-torch": {"size": "base", "variant": "moe", "kernels": "torch", "command": "fit",
                                 "runs": [{"exit": 1}]}}
    from bench.expert_speed import summarise

    assert speed_plot(summarise(failed, "GPU"), "GPU", tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()
    assert "speed.png" not in _write(args, tmp_path / "failed", failed)
