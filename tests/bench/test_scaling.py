"""The scaling runner on CPU: real ``cli.py fit`` runs under ExpertParallelStrategy (gloo), read back
into per-GPU throughput, and merged into an efficiency table. The GPU numbers come from the same code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from bench import scaling
from conftest import ROOT


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
                             "num_kv_heads": 2, "num_experts": 4, "top_k": 2, "ffn_hidden_size": 64},
                  "runtime": {"expert_backend": "grouped", "precision": "bf16"},
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
    assert cfg["model"]["config"]["num_layers"] == 3 and cfg["model"]["runtime"]["precision"] == "fp8-block"
    assert cfg["model"]["optim"]["warmup_steps"] == 100  # the recipe's own warm-up: no squeezed spike
    squeezed = scaling.scaling_config(base, scaling.Layout(1, 1), "bf16", 20, tmp_path, lr_warmup_steps=4)
    assert squeezed["model"]["optim"]["warmup_steps"] == 4 and base["model"]["optim"]["warmup_steps"] == 100
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


@pytest.mark.slow
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
        assert res.lr_warmup_steps == 100  # recorded: the config's own warm-up ran
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


@pytest.mark.slow
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


def test_report_names_the_machines_that_ran_the_points_not_the_one_that_merged_them(tmp_path):
    """Each point records the environment it ran in; the report lists those, and the machine that
    wrote the report apart from them; points from before the field are counted, not guessed."""
    points = tmp_path / "points"
    points.mkdir()
    base = dict(model="m", layers=2, precision="bf16", layout="single-device", gpus=1, steps_timed=5,
                tokens_per_s=100.0, tokens_per_s_per_gpu=100.0, tflops_per_gpu=1.0, mfu=0.1, peak_mem_gb=1.0,
                first_loss=4.0, last_loss=3.0, wall_s=10.0)
    gpu = {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "date": "2026-12-01"}
    (points / "a.json").write_text(json.dumps({**base, "environment": gpu}))
    (points / "b.json").write_text(json.dumps({**base, "layout": "dp1xep1", "environment": gpu}))
    (points / "c.json").write_text(json.dumps({**base, "layout": "dp1xep2", "gpus": 2}))  # an older point
    assert scaling.main(["report", str(points), "--out", str(tmp_path / "o")]) == 0
    report = json.loads((tmp_path / "o" / "scaling.json").read_text())
    assert report["run_environments"] == [gpu] and report["runs_without_environment"] == 1
    assert "environment" not in report and report["report_written_on"]["gpu"] is None  # this CPU
    assert [r["environment"] for r in report["results"]].count(gpu) == 2


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


def test_scaling_config_drops_the_precision_fallback_and_pinned_shard_size(tmp_path):
    """A point is labelled with the precision it asks for, so it must not quietly run another
    (mixtral-8x7b-ep8 falls back from mxfp8 to fp8-block); and its GPU count sets the FSDP size."""
    base = tiny_ep_config()
    base["model"]["runtime"]["precision_fallback"] = "bf16"
    base["trainer"]["strategy"]["init_args"]["data_parallel_shard_size"] = 8
    cfg = scaling.scaling_config(base, scaling.Layout(1, 2), "fp8-block", 5, tmp_path)
    assert "precision_fallback" not in cfg["model"]["runtime"]
    assert cfg["trainer"]["strategy"]["init_args"]["data_parallel_shard_size"] == "auto"
    assert base["model"]["runtime"]["precision_fallback"] == "bf16"


def test_shape_of_fills_what_the_config_leaves_to_the_defaults():
    from biomoe.model.config import ModelConfig

    cfg = {"model": {"config": {"hidden_size": 32}}, "data": {"fasta": "x.fa"}}
    shape = scaling.shape_of(cfg)
    assert shape.hidden == 32 and shape.layers == ModelConfig.num_layers
    assert shape.kv_heads == ModelConfig.num_kv_heads and shape.ffn == ModelConfig.ffn_hidden_size
    assert (shape.seq, shape.micro_batch) == (1024, 8)  # GenomeDataModule's defaults


def test_shape_of_counts_dense_blocks_as_the_model_does():
    """FLOPs of a partly dense config: its dense blocks are SwiGLU MLPs of their own width, not
    MoE layers; a uniform MoE config keeps the bench formula, which must agree with the model's."""
    from biomoe.model.config import ModelConfig

    moe = {"hidden_size": 64, "num_layers": 4, "num_heads": 4, "num_kv_heads": 2, "num_experts": 4,
           "top_k": 2, "ffn_hidden_size": 96, "vocab_size": 64}
    uniform = scaling.shape_of({"model": {"config": moe}, "data": {}})
    assert uniform.active_params() == ModelConfig(**moe).active_params_per_token()
    mixed = {**moe, "moe_layers": [1, 3], "dense_ffn_hidden_size": 320}
    shape = scaling.shape_of({"model": {"config": mixed}, "data": {}})
    assert shape.active_params() == ModelConfig(**mixed).active_params_per_token()
    assert shape.active_params() != uniform.active_params()  # 320 != top_k * 96: the count moved
    assert shape.with_seq(4096).active_params() == shape.active_params()


def _write_metrics(path: Path, tokens_per_s: float) -> None:
    path.mkdir(parents=True)
    rows = ["step,train/loss,train/tokens_per_s"] + [f"{s},{4 - s * 0.1},{tokens_per_s}" for s in range(1, 6)]
    (path / "metrics.csv").write_text("\n".join(rows) + "\n")


def test_read_metrics_takes_the_newest_version_by_number(tmp_path):
    """A point re-run ten times: version_10 is the newest, although it sorts before version_9."""
    _write_metrics(tmp_path / "version_9", 100.0)
    _write_metrics(tmp_path / "version_10", 200.0)
    assert scaling.read_metrics(tmp_path, warmup=2)["tokens_per_s"] == 200.0


def test_activation_checkpointing_is_recorded_and_kept_apart(tmp_path):
    """With and without recomputation are different measurements: separate files, labelled in the
    table, and an AC row's efficiency is against the 1-GPU AC run only."""
    metrics = {"tokens_per_s": 100.0, "steps_timed": 5, "first_loss": 4.0, "last_loss": 3.0, "peak_mem_gb": None}
    rows = []
    for ac, layout in ((False, scaling.Layout(1, 1)), (True, scaling.Layout(1, 2))):
        cfg = scaling.scaling_config(tiny_ep_config(), layout, "bf16", 5, tmp_path, activation_checkpointing=ac)
        rows.append(scaling.result_from_metrics(cfg, "tiny", "bf16", layout, metrics, 1.0))
    assert [r.activation_checkpointing for r in rows] == [False, True]
    scaling.add_efficiency(rows)
    assert rows[0].efficiency == pytest.approx(1.0) and rows[1].efficiency is None
    assert "bf16 + AC" in scaling.markdown(rows)
    names = {scaling.point_name("tiny", 2, "bf16", scaling.Layout(1, 1), ac) for ac in (False, True)}
    assert len(names) == 2
    old = {k: v for k, v in scaling.asdict(rows[0]).items() if k != "activation_checkpointing"}
    assert scaling.ScalingResult(**old).activation_checkpointing is False  # earlier JSONs still load


@pytest.mark.parametrize("extra, fragment", [
    (["--layers", "0"], "--layers 0"),
    (["--steps", "10", "--warmup", "10"], "warmup < steps"),
    (["--precisions", "bf16,fp8-blok"], "fp8-blok"),
    (["--timeout", "0"], "--timeout"),
    (["--cli-args=--trainer.profiler='simple"], "--cli-args"),
])
def test_bad_run_arguments_are_one_line_and_exit_2(tmp_path, capsys, extra, fragment):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tiny_ep_config()))
    assert scaling.main(["run", "--config", str(path), "--out", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and "\n" not in err and err.startswith("biomoe scaling: error:")
    assert not (tmp_path / "o").exists()  # refused before any fit


def test_unreadable_result_json_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "x.json").write_text("{")
    assert scaling.main(["report", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "x.json" in err and "\n" not in err


def _fake_cli(root: Path, body: str) -> None:
    """A stand-in for cli.py, so that the runner's process handling is tested in seconds."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "cli.py").write_text("import os, subprocess, sys, time\n" + body)


def _fake_ranks(tmp_path: Path) -> Path:
    """A cli.py that, like Lightning, starts rank 1 as its child; both write their pid and wait."""
    pids = tmp_path / "pids"
    _fake_cli(tmp_path / "root", f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                                 f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\ntime.sleep(60)\n")
    return pids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _wait_for_pids(pids: Path, seconds: float) -> list[int]:
    import time

    deadline = time.monotonic() + seconds
    while not (pids.exists() and len(pids.read_text().split()) == 2) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [int(pid) for pid in pids.read_text().split()]


def _assert_all_end_then_clean_up(pids: Path) -> None:
    """Both fake ranks are gone within seconds; whatever the outcome, none is left running."""
    import os
    import signal
    import time

    started = [int(pid) for pid in pids.read_text().split()] if pids.exists() else []
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    survivors = [pid for pid in started if _alive(pid)]
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert len(started) == 2 and not survivors, f"ranks outlived the runner: {survivors}"


@pytest.mark.slow
def test_a_timed_out_fit_takes_its_other_ranks_with_it(tmp_path, monkeypatch):
    """Lightning starts ranks 1..N-1 as children of rank 0: on timeout none may keep its GPU."""
    import subprocess

    pids = _fake_ranks(tmp_path)
    monkeypatch.setattr(scaling, "ROOT", tmp_path / "root")
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            scaling.fit(tiny_ep_config(), tmp_path / "run", timeout_s=4)
    finally:
        _assert_all_end_then_clean_up(pids)


def test_a_second_runner_on_the_same_point_is_refused(tmp_path, monkeypatch):
    import fcntl

    _fake_cli(tmp_path / "root", "sys.exit(0)\n")
    monkeypatch.setattr(scaling, "ROOT", tmp_path / "root")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with (run_dir / ".scaling.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(RuntimeError, match="another scaling runner"):
            scaling.fit(tiny_ep_config(), run_dir, timeout_s=30)
    assert scaling.fit(tiny_ep_config(), run_dir, timeout_s=30) >= 0  # free again


def test_a_failed_rerun_does_not_leave_the_previous_result_behind(tmp_path, monkeypatch, capsys):
    _fake_cli(tmp_path / "root", "print('boom'); sys.exit(1)\n")
    monkeypatch.setattr(scaling, "ROOT", tmp_path / "root")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tiny_ep_config()))
    out = tmp_path / "o"
    out.mkdir()
    name = scaling.point_name("c", 2, "bf16", scaling.Layout(1, 1))
    (out / f"{name}.json").write_text("{}")  # an earlier success of the same point
    assert scaling.main(["run", "--config", str(path), "--layouts", "1x1", "--precisions", "bf16",
                         "--out", str(out)]) == 1
    assert not (out / f"{name}.json").exists() and "boom" in (out / f"{name}.failed").read_text()


@pytest.mark.slow
def test_sigterm_to_the_runner_takes_the_fit_with_it(tmp_path):
    """``timeout 300 python -m bench.scaling ...`` signals the runner's process group; the
    fit runs in its own, so the runner must pass the end on rather than die alone."""
    import signal
    import subprocess
    import sys

    pids = _fake_ranks(tmp_path)
    script = (f"from pathlib import Path\nfrom bench import scaling\n"
              f"scaling.ROOT = Path({str(tmp_path / 'root')!r})\n"
              f"scaling.fit({{}}, Path({str(tmp_path / 'run')!r}), timeout_s=60)\n")
    runner = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    try:
        _wait_for_pids(pids, 30)
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=10) == 128 + signal.SIGTERM
    finally:
        if runner.poll() is None:
            runner.kill()
        _assert_all_end_then_clean_up(pids)


def _fake_fit_writing_metrics(root: Path) -> None:
    """A cli.py that trains nothing but leaves the CSVLogger file a fit would, beside its config."""
    _fake_cli(root, "from pathlib import Path\n"
                    "log = Path(sys.argv[sys.argv.index('--config') + 1]).parent / 'version_0'\n"
                    "log.mkdir(parents=True)\n"
                    "rows = ['step,train/loss,train/tokens_per_s'] + [f'{s},{4 - s / 10},100.0' for s in range(6)]\n"
                    "(log / 'metrics.csv').write_text('\\n'.join(rows) + '\\n')\n")


def test_each_point_records_the_machine_that_ran_it(tmp_path, monkeypatch):
    """A point file carries the GPU name, the GPUs its fit could see, torch, Transformer Engine and
    the date of the machine that ran it: the report is often merged on another machine."""
    _fake_fit_writing_metrics(tmp_path / "root")
    monkeypatch.setattr(scaling, "ROOT", tmp_path / "root")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tiny_ep_config()))
    out = tmp_path / "points"
    assert scaling.main(["run", "--config", str(path), "--layouts", "1x1", "--precisions", "bf16",
                         "--steps", "6", "--warmup", "2", "--out", str(out)]) == 0
    (point,) = [json.loads(p.read_text()) for p in out.glob("*.json")]
    env = point["environment"]
    assert {"gpu", "gpu_count", "torch", "transformer_engine", "date"} <= set(env)
    import torch

    assert env["torch"] == torch.__version__ and env["gpu_count"] == torch.cuda.device_count()
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", env["date"])


def test_the_report_keeps_each_points_machine_apart_from_the_merging_one(tmp_path, monkeypatch):
    """Merged elsewhere, the report still names the points' machine, in scaling.json and scaling.md,
    and the merging machine only as the one that wrote the report."""
    points = tmp_path / "points"
    points.mkdir()
    base = dict(model="m", layers=2, precision="bf16", layout="dp1xep1", gpus=1, steps_timed=5,
                tokens_per_s=100.0, tokens_per_s_per_gpu=100.0, tflops_per_gpu=1.0, mfu=0.1, peak_mem_gb=1.0,
                first_loss=4.0, last_loss=3.0, wall_s=10.0)
    ran_on = {"gpu": "NVIDIA H200", "gpu_count": 2, "torch": "2.11.0+cu130", "transformer_engine": "2.20.2",
              "date": "2026-12-01"}
    (points / "a.json").write_text(json.dumps({**base, "environment": ran_on}))
    (points / "b.json").write_text(json.dumps({**base, "layout": "dp1xep2", "gpus": 2, "environment": ran_on}))
    (points / "c.json").write_text(json.dumps({**base, "layout": "dp2xep1", "gpus": 2}))  # an older point
    merging = {"gpu": "Merging GPU", "torch": "9.9", "transformer_engine": None, "date": "2027-01-01"}
    monkeypatch.setattr(scaling, "environment", lambda: dict(merging))
    assert scaling.main(["report", str(points), "--out", str(tmp_path / "o")]) == 0
    report = json.loads((tmp_path / "o" / "scaling.json").read_text())
    assert report["run_environments"] == [ran_on] and report["report_written_on"] == merging
    assert "environment" not in report
    md = (tmp_path / "o" / "scaling.md").read_text()
    assert "NVIDIA H200 (2 visible), torch 2.11.0+cu130, Transformer Engine 2.20.2, 2026-12-01: 2 points" in md
    assert "not recorded: 1 point" in md and "Merging GPU" not in md and "9.9" not in md
