"""The MoE-against-dense study runner: equal active parameters per variant, the subset that travels,
and the report's grouping of per-genome validation curves by corpus split."""

from __future__ import annotations

import csv
import json
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
