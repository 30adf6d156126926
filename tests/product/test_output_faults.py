"""Outputs under faults: a command's outputs change together or not at all, and running out of a
resource (disk, file size limit, a read-only folder, memory) is one line, not a traceback.

The subprocess tests run the real CLI under the fault (``RLIMIT_FSIZE`` set in the child, a
read-only folder, SIGKILL in the middle of writing) and check the exit status, that stderr ends in
exactly one ``biomoe: error:`` line with no traceback, and that the earlier outputs are byte for
byte as they were.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from biomoe import files, output_set, temporaries
from biomoe.cli.user_errors import classify
from biomoe.errors import GenomeInputError
from biomoe.model.config import ModelConfig
from biomoe.model.transformer import MoETransformer
from conftest import ROOT, random_dna, save_checkpoint

TINY_MODEL = dict(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                  ffn_hidden_size=32)


# ------------------------------------------------------------------------- the mechanism itself
def test_outputs_commit_together(tmp_path: Path) -> None:
    a, b = tmp_path / "x.tsv", tmp_path / "x.npz"
    with output_set.commit_together([a, b]) as (ta, tb):
        ta.write_text("new a")
        tb.write_text("new b")
        assert not a.exists() and not b.exists()  # nothing appears before the block has written all
    assert a.read_text() == "new a" and b.read_text() == "new b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npz", "x.tsv"]


@pytest.mark.parametrize("failure", [OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), KeyboardInterrupt()])
def test_a_failure_after_the_first_output_changes_none(tmp_path: Path, failure: BaseException) -> None:
    a, b = tmp_path / "x.tsv", tmp_path / "x.npz"
    a.write_text("old a")
    b.write_text("old b")
    with pytest.raises((GenomeInputError, KeyboardInterrupt)) as caught:
        with output_set.commit_together([a, b]) as outputs:
            outputs.temp(a).write_text("new a")
            outputs.temp(b).write_text("half")
            raise failure
    if isinstance(failure, OSError):
        assert str(caught.value) == f"{b}: cannot write output (No space left on device)"  # the one written last
    assert a.read_text() == "old a" and b.read_text() == "old b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npz", "x.tsv"]


def test_a_rename_failing_midway_puts_the_earlier_outputs_back(tmp_path: Path, monkeypatch) -> None:
    a, b = tmp_path / "x.tsv", tmp_path / "x.npz"
    a.write_text("old a")
    real_replace = os.replace

    def failing_replace(src, dst):
        if Path(dst) == b:
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(dst))
        return real_replace(src, dst)

    with pytest.raises(GenomeInputError):
        with output_set.commit_together([a, b]) as (ta, tb):
            ta.write_text("new a")
            tb.write_text("new b")
            monkeypatch.setattr(output_set.os, "replace", failing_replace)
    monkeypatch.undo()
    assert a.read_text() == "old a" and not b.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.tsv"]


def test_a_dropped_output_is_removed_only_on_commit(tmp_path: Path) -> None:
    results, sidecar = tmp_path / "r.tsv", tmp_path / "r.skipped.tsv"
    sidecar.write_text("stale")
    with pytest.raises(RuntimeError):
        with output_set.commit_together([results, sidecar]) as outputs:
            outputs.temp(results).write_text("new")
            outputs.drop(sidecar)
            raise RuntimeError("scoring failed")
    assert sidecar.read_text() == "stale" and not results.exists()
    with output_set.commit_together([results, sidecar]) as outputs:
        outputs.temp(results).write_text("new")
        outputs.drop(sidecar)
    assert results.read_text() == "new" and not sidecar.exists()


def test_temporaries_of_dead_processes_are_swept(tmp_path: Path) -> None:
    out = tmp_path / "e.npz"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".e.npz{temporaries.TEMP_MARK}{dead.pid}-abc.rows.npy"
    stale.write_bytes(b"x" * 10)
    live = tmp_path / f".e.npz{temporaries.TEMP_MARK}{os.getppid()}-abc.tmp.npz"  # a process that still runs
    live.write_bytes(b"y")
    other = tmp_path / f".other.npz{temporaries.TEMP_MARK}{dead.pid}-abc.tmp"  # another output's
    other.write_bytes(b"z")
    assert temporaries.sweep_stale_temps(out) == [stale]
    assert live.exists() and other.exists() and not stale.exists()


def test_library_write_failures_become_one_line(tmp_path: Path) -> None:
    out = tmp_path / "model.safetensors"
    rust = RuntimeError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space" })')
    assert str(files.write_failure(out, rust)) == f"{out}: cannot write output (No space left on device)"
    quota = OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
    assert str(files.write_failure(out, quota)) == f"{out}: cannot write output ({os.strerror(errno.EDQUOT)})"
    assert files.write_failure(out, ValueError("a bug")) is None


# ----------------------------------------------------------------------- resource errors classified
def _raised(exc: BaseException, where: str = "<test>") -> BaseException:
    """``exc`` with a traceback whose frame comes from a file named ``where``."""
    code = compile("def run(exc):\n    raise exc\n", where, "exec")
    scope: dict = {}
    exec(code, scope)
    try:
        scope["run"](exc)
    except BaseException as caught:  # noqa: BLE001 - the point is to keep what was raised
        return caught
    raise AssertionError("not raised")


def test_cuda_out_of_memory_names_the_option_to_lower() -> None:
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 80 GiB")
    scoring = classify(_raised(oom, str(ROOT / "biomoe" / "cli" / "score_fasta.py")))
    assert scoring is not None and scoring.exit_code != 0
    assert scoring.message == ("out of GPU memory (allocating 2.00 GiB): lower --batch-tokens or --batch-size "
                               "(or --window)")
    training = classify(_raised(torch.OutOfMemoryError("CUDA out of memory.")))
    assert training is not None and "data.seq_length" in training.message


def test_host_memory_error_is_a_user_error() -> None:
    found = classify(_raised(MemoryError(), str(ROOT / "biomoe" / "cli" / "generate.py")))
    assert found is not None and found.message == "out of host memory: lower --batch-size (or --length, --num-samples)"


@pytest.mark.parametrize("number", [errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS])
def test_resource_os_errors_name_the_file(number: int) -> None:
    found = classify(_raised(OSError(number, os.strerror(number), "/data/out.tsv")))
    assert found is not None and found.message == f"/data/out.tsv: cannot write output ({os.strerror(number)})"


# --------------------------------------------------------------------------- foreign HF folders
def test_import_of_a_folder_without_biomoe_vocabulary_warns(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("safetensors")
    from biomoe.interop.hf import import_hf

    cfg = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2)
    torch.manual_seed(0)
    transformers.MixtralForCausalLM(transformers.MixtralConfig(**cfg)).save_pretrained(tmp_path / "hf")
    with pytest.warns(UserWarning, match="no tokenizer.json"):
        import_hf(tmp_path / "hf", tmp_path / "a.ckpt")
    vocab = {"<pad>": 0, "A": 1, "C": 2}
    (tmp_path / "hf" / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}}))
    with pytest.warns(UserWarning, match=r"token ids differ: 'A' is 1 \(biomoe: \d+\)"):
        import_hf(tmp_path / "hf", tmp_path / "b.ckpt")


def test_import_of_biomoe_export_does_not_warn(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("safetensors")
    from biomoe.interop.hf import export_hf, import_hf

    cfg = ModelConfig(**TINY_MODEL)
    save_checkpoint(tmp_path / "m.ckpt", MoETransformer(cfg), cfg)
    export_hf(tmp_path / "m.ckpt", tmp_path / "hf")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        import_hf(tmp_path / "hf", tmp_path / "back.ckpt")


# ------------------------------------------------------------------------------ the real CLI
@pytest.fixture
def tiny(tmp_path: Path) -> dict[str, Path]:
    fasta = tmp_path / "ref.fa"
    fasta.write_text(">c1\n" + random_dna(4000, 3) + "\n>c2\n" + random_dna(3000, 4) + "\n")
    torch.manual_seed(0)
    cfg = ModelConfig(**TINY_MODEL)
    ckpt = save_checkpoint(tmp_path / "model.ckpt", MoETransformer(cfg), cfg, data={"seq_length": 256})
    return {"fasta": fasta, "ckpt": ckpt}


def _biomoe(args: list[str], limit_bytes: int | None = None, **popen) -> subprocess.CompletedProcess:
    def limit() -> None:
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "biomoe.cli.main", *map(str, args)], capture_output=True,
                          text=True, preexec_fn=limit, env=env, timeout=300, **popen)


def _one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode not in (0, None), result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("biomoe: error:")]
    assert len(errors) == 1, result.stderr[-3000:]
    return errors[0]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.slow
def test_score_fasta_under_a_file_size_limit_keeps_both_earlier_outputs(tmp_path: Path, tiny) -> None:
    out = tmp_path / "res" / "scores"
    ok = _biomoe(["score-fasta", tiny["ckpt"], tiny["fasta"], "--out", out, "--per-base", "--no-progress"])
    assert ok.returncode == 0, ok.stderr
    before = _snapshot(out.parent)
    assert set(before) == {"scores.tsv", "scores.npz"}
    # the tsv (about 100 bytes) fits, the per-base npz (about 28 kB) does not
    failed = _biomoe(["score-fasta", tiny["ckpt"], tiny["fasta"], "--out", out, "--per-base", "--no-progress",
                      "--window", "128"], limit_bytes=4096)
    line = _one_error_line(failed)
    assert line.startswith(f"biomoe: error: {out}.npz: cannot write output (File too large"), line
    assert _snapshot(out.parent) == before  # the new tsv did not land beside the old npz


@pytest.mark.slow
def test_export_hf_under_a_file_size_limit_keeps_the_earlier_folder(tmp_path: Path, tiny) -> None:
    pytest.importorskip("safetensors")
    pytest.importorskip("transformers")
    out = tmp_path / "hf"
    ok = _biomoe(["export-hf", tiny["ckpt"], out])
    assert ok.returncode == 0, ok.stderr
    before = _snapshot(out)
    torch.manual_seed(1)
    cfg = ModelConfig(**TINY_MODEL)
    other = save_checkpoint(tmp_path / "other.ckpt", MoETransformer(cfg), cfg)
    failed = _biomoe(["export-hf", other, out], limit_bytes=8192)  # the weights are ~200 kB
    line = _one_error_line(failed)
    assert line.startswith(f"biomoe: error: {out / 'model.safetensors'}: cannot write output"), line
    assert _snapshot(out) == before
    assert not [p for p in out.iterdir() if temporaries.TEMP_MARK in p.name]


@pytest.mark.slow
@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only folders")
def test_score_fasta_into_a_read_only_folder_is_one_line(tmp_path: Path, tiny) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    (folder / "scores.tsv").write_text("earlier\n")
    folder.chmod(0o555)
    try:
        failed = _biomoe(["score-fasta", tiny["ckpt"], tiny["fasta"], "--out", folder / "scores", "--no-progress"])
        line = _one_error_line(failed)
        assert line.startswith(f"biomoe: error: {folder / 'scores.tsv'}: cannot write output"), line
        assert "Permission denied" in line
        assert _snapshot(folder) == {"scores.tsv": b"earlier\n"}
    finally:
        folder.chmod(0o755)


@pytest.mark.slow
def test_embed_killed_mid_write_leaves_the_earlier_output_and_the_rerun_sweeps(tmp_path: Path, tiny) -> None:
    out = tmp_path / "emb" / "e.npz"
    ok = _biomoe(["embed", tiny["ckpt"], tiny["fasta"], "--out", out, "--pool", "position", "--no-progress"])
    assert ok.returncode == 0, ok.stderr
    before = out.read_bytes()
    big = tmp_path / "big.fa"
    big.write_text(">big\n" + random_dna(400_000, 9) + "\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "biomoe.cli.main", "embed", str(tiny["ckpt"]), str(big),
                             "--out", str(out), "--pool", "position", "--no-progress", "--batch-tokens", "2048"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if [p for p in out.parent.iterdir() if temporaries.TEMP_MARK in p.name]:  # writing rows has begun
            break
        time.sleep(0.05)
    time.sleep(0.5)
    assert proc.poll() is None, "the run ended before it could be killed mid-write"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    leftovers = [p for p in out.parent.iterdir() if temporaries.TEMP_MARK in p.name]
    assert leftovers and out.read_bytes() == before  # killed: its scratch stays, the output is untouched
    rerun = _biomoe(["embed", tiny["ckpt"], tiny["fasta"], "--out", out, "--pool", "position", "--no-progress"])
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["e.npz"]
    assert np.load(out)["embeddings"].shape == np.load(__import__("io").BytesIO(before))["embeddings"].shape


def test_routing_json_and_heatmap_commit_together(tmp_path: Path, tiny, monkeypatch, capsys) -> None:
    """A heatmap that fails to draw leaves the earlier JSON too, not a new JSON beside an old figure."""
    pytest.importorskip("matplotlib")
    from biomoe.cli import routing
    from biomoe.cli.main import main as cli_main

    out = tmp_path / "r" / "routing.json"
    args = ["routing", "--ckpt_path", str(tiny["ckpt"]), "--fasta", str(tiny["fasta"]), "--windows", "2",
            "--seq_length", "64", "--batch_size", "2", "--out", str(out), "--no_progress"]
    assert cli_main(args) == 0
    before = _snapshot(out.parent)
    assert set(before) == {"routing.json", "routing.png"}

    def full_disk(report, path, dpi=150, atomic=True):
        Path(path).write_bytes(b"\x89PNG partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(routing, "plot_routing", full_disk)
    capsys.readouterr()
    assert cli_main([*args[:-1], "--windows", "3", "--no_progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"biomoe: error: {out.with_suffix('.png')}: cannot write output (No space left on device)"
    assert _snapshot(out.parent) == before
