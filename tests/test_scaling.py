"""The scaling runner on CPU: real ``cli.py fit`` runs under ExpertParallelStrategy (gloo), read back
into per-GPU throughput, and merged into an efficiency table. The GPU numbers come from the same code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from biomoe.bench import scaling

ROOT = Path(__file__).resolve().parents[1]


def tiny_ep_config() -> dict:
    return {
        "seed_everything": 0,
        "trainer": {"accelerator": "cpu", "devices": 1, "precision": "32-true", "inference_mode": False,
                    "strategy": {"class_path": "biomoe.parallel.strategy.ExpertParallelStrategy",
                                 "init_args": {"expert_parallel_size": 1, "meta_init": True,
                                               "process_group_backend": "gloo"}},
                    "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                   "init_args": {"save_last": True}}]},
        "model": {"config": {"vocab_size": 64, "hidden_size": 32, "num_layers": 2, "num_heads": 4,
                             "num_kv_heads": 2, "num_experts": 4, "top_k": 2, "ffn_hidden_size": 64,
                             "expert_backend": "grouped", "precision": "bf16"},
                  "optim": {"lr": 3.0e-3, "warmup_steps": 100}},
        "data": {"fasta": str(ROOT / "data/lambda_virus.fa.gz"), "seq_length": 128, "stride": 128,
                 "batch_size": 2, "num_workers": 0, "val_fraction": 0.1},
    }


def test_layout_parse():
    assert scaling.Layout.parse("2x4") == scaling.Layout(2, 4)
    assert scaling.Layout.parse("2x4").gpus == 8 and scaling.Layout.parse("1x2").label == "dp1xep2"
    single = scaling.Layout.parse("single")
    assert single.gpus == 1 and single.single_device and single.label == "single-device"
    for bad in ("4", "2x", "0x2", "axb"):
        with pytest.raises(ValueError, match="layout"):
            scaling.Layout.parse(bad)


def test_scaling_config_changes_only_the_layout_and_run(tmp_path):
    base = tiny_ep_config()
    cfg = scaling.scaling_config(base, scaling.Layout(2, 2), "fp8-block", 20, tmp_path, layers=3)
    assert cfg["trainer"]["devices"] == 4
    assert cfg["trainer"]["strategy"]["init_args"]["expert_parallel_size"] == 2
    assert cfg["model"]["config"]["num_layers"] == 3 and cfg["model"]["config"]["precision"] == "fp8-block"
    assert cfg["model"]["optim"]["warmup_steps"] == 4  # short runs must not sit at lr ~ 0
    classes = [c["class_path"] for c in cfg["trainer"]["callbacks"]]
    assert not any(c.endswith("ModelCheckpoint") for c in classes) and classes[-1].endswith("DeviceStatsMonitor")
    assert base["model"]["config"]["num_layers"] == 2  # the base config is not modified
    assert cfg["model"]["config"]["hidden_size"] == base["model"]["config"]["hidden_size"]
    single = scaling.scaling_config(base, scaling.Layout.parse("single"), "bf16", 5, tmp_path)
    assert "strategy" not in single["trainer"] and single["trainer"]["devices"] == 1
    plain = tiny_ep_config()
    plain["trainer"].pop("strategy")
    with pytest.raises(ValueError, match="ExpertParallelStrategy"):
        scaling.scaling_config(plain, scaling.Layout(1, 1), "bf16", 5, tmp_path)


def test_cpu_fits_at_ep1_and_ep2_give_a_scaling_table(tmp_path):
    results = []
    for layout in (scaling.Layout(1, 1), scaling.Layout(1, 2), scaling.Layout.parse("single")):
        run_dir = tmp_path / layout.label
        cfg = scaling.scaling_config(tiny_ep_config(), layout, "bf16", 12, run_dir)
        wall = scaling.fit(cfg, run_dir, timeout_s=300)
        metrics = scaling.read_metrics(run_dir, warmup=4)
        assert metrics["steps_timed"] >= 7 and metrics["tokens_per_s"] > 0
        assert metrics["last_loss"] < metrics["first_loss"]  # it trained
        res = scaling.result_from_metrics(cfg, "tiny", "bf16", layout, metrics, wall)
        assert res.tokens_per_s_per_gpu == pytest.approx(res.tokens_per_s / layout.gpus)
        (tmp_path / "raw").mkdir(exist_ok=True)
        (tmp_path / "raw" / f"{layout.label}.json").write_text(json.dumps(scaling.asdict(res)))
        results.append(res)
    assert scaling.main(["report", str(tmp_path / "raw"), "--out", str(tmp_path / "report")]) == 0
    merged = json.loads((tmp_path / "report" / "scaling.json").read_text())["results"]
    eff = {r["layout"]: r["efficiency"] for r in merged}
    assert eff["dp1xep1"] == pytest.approx(1.0)
    assert eff["dp1xep2"] == pytest.approx(results[1].tokens_per_s_per_gpu / results[0].tokens_per_s_per_gpu)
    assert eff["single-device"] == pytest.approx(results[2].tokens_per_s_per_gpu / results[0].tokens_per_s_per_gpu)
    assert "dp1xep2" in (tmp_path / "report" / "scaling.md").read_text()
    assert (tmp_path / "report" / "scaling.png").stat().st_size > 0


def test_failed_fit_is_reported_with_its_log_tail(tmp_path):
    cfg = scaling.scaling_config(tiny_ep_config(), scaling.Layout(1, 1), "bf16", 3, tmp_path / "bad")
    cfg["data"]["fasta"] = str(tmp_path / "missing.fa")
    with pytest.raises(RuntimeError, match="fit failed"):
        scaling.fit(cfg, tmp_path / "bad", timeout_s=120)
    with pytest.raises(FileNotFoundError, match="metrics.csv"):
        scaling.read_metrics(tmp_path / "nothing", warmup=0)


def test_report_without_results_is_an_error(tmp_path, capsys):
    assert scaling.main(["report", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "no result JSON" in capsys.readouterr().err


@pytest.mark.parametrize("content, fragment", [
    (None, "cannot read"),
    ("trainer: [unclosed", "cannot read"),
    ("just text", "not a biomoe fit config"),
    ("model: {config: {num_layers: 2}}\ndata: {seq_length: 8}\ntrainer: {devices: 1}\n", "ExpertParallelStrategy"),
])
def test_bad_config_is_one_line_and_exit_2(tmp_path, capsys, content, fragment):
    path = tmp_path / "c.yaml"
    if content is not None:
        path.write_text(content)
    assert scaling.main(["run", "--config", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and "\n" not in err and err.startswith("biomoe scaling: error:")


def test_bad_layout_is_one_line_and_exit_2(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tiny_ep_config()))
    assert scaling.main(["run", "--config", str(path), "--layouts", "1x1,4", "--out", str(tmp_path / "o")]) == 2
    assert "layout '4'" in capsys.readouterr().err
