"""An installed Transformer Engine that fails to import is never silent: ``auto`` says why it chose
torch's kernels, and a config that names TE is refused in one line giving the reason."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import biomoe.backends.select as select
from biomoe.backends.te import availability
from biomoe.backends.te.availability import DeviceInfo, te_import_error, te_installed, te_usable
from biomoe.errors import ConfigError
from biomoe.model.config import ModelConfig, RuntimeConfig

REASON = "libcudnn_graph.so.9: cannot open shared object file: No such file or directory"


@pytest.fixture
def broken_te(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A ``transformer_engine`` package whose ``pytorch`` module fails as a broken install does,
    on a machine that has a CUDA GPU (Hopper)."""
    package = tmp_path / "transformer_engine"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "pytorch.py").write_text(f"raise OSError({REASON!r})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "transformer_engine" or m.startswith("transformer_engine.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(select, "device_info", lambda device=None: DeviceInfo("NVIDIA H100", (9, 0)))
    te_import_error.cache_clear()
    te_installed.cache_clear()
    yield
    te_import_error.cache_clear()
    te_installed.cache_clear()


def test_the_reason_is_kept(broken_te):
    assert te_import_error() == f"OSError: {REASON}"
    assert not te_installed() and not te_usable(torch.device("cuda"))


def test_auto_says_why_it_chose_torch_kernels(broken_te):
    selection = select.select_backends(ModelConfig(), RuntimeConfig(), torch.device("cuda"))
    assert selection.paths["router"] == "torch" and not selection.precision.use_te
    line = selection.summary("bf16-true")
    assert "fails to import" in line and REASON in line, line


@pytest.mark.parametrize("setting", [{"norm_backend": "te"}, {"attention_backend": "te"},
                                     {"expert_backend": "te"}, {"precision": "fp8-current"}])
def test_a_config_that_names_te_is_refused_with_the_reason(broken_te, setting):
    with pytest.raises(ConfigError) as info:
        select.select_backends(ModelConfig(), RuntimeConfig(**setting), torch.device("cuda"))
    message = str(info.value)
    assert "\n" not in message and REASON in message and "fails to import" in message, message
    assert "not installed" not in message, message


def test_a_missing_te_is_not_called_broken(monkeypatch):
    monkeypatch.setattr(availability.importlib.util, "find_spec", lambda name, *a: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    te_import_error.cache_clear()
    try:
        assert te_import_error() is None
        assert select.te_broken_reason(RuntimeConfig(), torch.device("cuda")) is None
    finally:
        te_import_error.cache_clear()
