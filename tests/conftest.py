"""Shared fixtures: small FASTA files written into pytest's tmp_path, the tiny model's config and a
checkpoint of it."""

from __future__ import annotations

import contextlib

import gzip
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

# Lightning attaches a stderr handler to its loggers when it is first imported. The CLI imports it
# only when a command needs it, so without this the first in-process command of a test would bind
# that handler to the test's captured stream, which pytest closes afterwards: every later test's
# Lightning log line would then fail with "Logging error". Importing it here binds the stream pytest
# keeps for the whole run.
import lightning.pytorch  # noqa: E402,F401
import torch  # noqa: E402

# The repository root (tests/ sits directly under it; the tests themselves are one folder deeper, in
# tests/<package>/), for tests that read configs/, data/, docs/ or run cli.py.
ROOT = Path(__file__).resolve().parents[1]


def fasta_text(records: dict[str, str], width: int = 60, newline: str = "\n") -> str:
    """Render records as FASTA text with fixed line width."""
    lines: list[str] = []
    for name, seq in records.items():
        lines.append(f">{name} test record")
        lines.extend(seq[i : i + width] for i in range(0, len(seq), width))
    return newline.join(lines) + newline


@pytest.fixture
def write_fasta(tmp_path: Path) -> Callable[..., Path]:
    """write_fasta(records, name="g.fa", compression=None|"gzip"|"bgzf", width=60, newline="\\n")."""

    def _write(
        records: dict[str, str] | str | bytes,
        name: str = "g.fa",
        compression: str | None = None,
        width: int = 60,
        newline: str = "\n",
    ) -> Path:
        if isinstance(records, dict):
            data = fasta_text(records, width, newline).encode()
        elif isinstance(records, str):
            data = records.encode()
        else:
            data = records
        path = tmp_path / name
        if compression == "gzip":
            path.write_bytes(gzip.compress(data))
        elif compression == "bgzf":
            from Bio import bgzf

            with bgzf.BgzfWriter(str(path), "wb") as fh:
                fh.write(data)
        else:
            path.write_bytes(data)
        return path

    return _write


def random_dna(n: int, seed: int = 0, alphabet: str = "ACGT") -> str:
    rng = np.random.default_rng(seed)
    return "".join(np.array(list(alphabet))[rng.integers(0, len(alphabet), n)])


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    path = tmp_path / "cache"
    path.mkdir()
    return path


def save_checkpoint(path: Path, model, cfg, data: dict | None = None) -> Path:
    """``model`` saved as ``cli.py fit`` would (``model.``-prefixed weights, the config as a
    hyper-parameter, and ``data``, if given, as the datamodule's hyper-parameters), so
    ``biomoe.inference.scoring.load_model`` and the CLI commands read it."""
    import torch

    ckpt = {"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
            "hyper_parameters": {"config": cfg}}
    if data is not None:
        ckpt["datamodule_hyper_parameters"] = data
    torch.save(ckpt, path)
    return path


TINY_MODEL = dict(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2, ffn_hidden_size=32)
"""The small model most tests build: two layers, four experts, seconds to train on a CPU."""


@pytest.fixture(scope="package")
def tiny_config() -> Callable[..., object]:
    """``tiny_config(**overrides)``: a new ``ModelConfig`` of :data:`TINY_MODEL` with ``overrides``
    (``tiny_config(num_layers=1, init_std=0.3)``); package-scoped so module-scoped fixtures can use it."""
    from biomoe.model.config import ModelConfig

    def make(**overrides):
        return ModelConfig(**{**TINY_MODEL, **overrides})

    return make


@pytest.fixture(scope="package")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint of the tiny model as initialised after ``torch.manual_seed(0)`` (``init_std=0.3``:
    outputs depend visibly on context), written once for the whole run: read it, never change it.
    The global random state is left as it was."""
    import torch

    from biomoe.model.config import ModelConfig
    from biomoe.model.transformer import MoETransformer

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        cfg = ModelConfig(**TINY_MODEL, init_std=0.3)
        model = MoETransformer(cfg)
    return save_checkpoint(tmp_path_factory.mktemp("tiny") / "tiny.ckpt", model, cfg)


def error_line(stderr: str) -> str:
    """The last stderr line, which must be a ``biomoe: error:`` report with no traceback before it."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert lines and lines[-1].startswith("biomoe: error: "), stderr[-3000:]
    return lines[-1]


def pytest_unconfigure(config: pytest.Config) -> None:
    """Let the test run end when its tests end: torch.compile (the compiled AdamW and per-block graph
    tests on a GPU) leaves a pool of compile-worker processes that the interpreter otherwise waits
    for at exit, so a run printed its result and then sat for tens of seconds. The pool is shut
    down after the last test, pytest's exit status is left as it is, and any other non-daemon
    thread still running (the next thing that would keep the process alive) is named, not hidden."""
    import threading

    from biomoe.compat.inductor import shutdown_compile_workers

    shutdown_compile_workers()
    lingering = [t.name for t in threading.enumerate()
                 if t is not threading.main_thread() and t.is_alive() and not t.daemon]
    if lingering:
        print(f"threads still running after the tests: {', '.join(lingering)}", file=sys.stderr)


@pytest.fixture(autouse=True)
def no_process_group_carried_over():
    """Each test starts without a default process group. An in-process ``fit`` under a strategy
    that makes one (the expert-parallel strategy, even at one device) leaves it behind, as
    Lightning does; a later test that makes its own would find one already there."""
    yield
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


@contextlib.contextmanager
def torch_threads(count: int):
    """torch on ``count`` intra-op threads inside the block, the count before restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def two_threads():
    """torch on two intra-op threads for the test (a shared 2-core CPU)."""
    with torch_threads(2):
        yield


@pytest.fixture
def one_thread():
    """CPU timing with one thread: on a shared machine, more threads wait on each other."""
    with torch_threads(1):
        yield
