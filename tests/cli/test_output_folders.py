"""An output path the file system refuses (a folder that cannot be created or written: read-only,
``chattr +i``) is one line naming it, never a traceback."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from biomoe.cli.main import main
from conftest import ROOT, error_line

LAMBDA = str(ROOT / "data/lambda_virus.fa.gz")


@pytest.fixture
def locked(tmp_path: Path, monkeypatch) -> Path:
    """A folder in which nothing can be created, as ``chattr +i`` makes one (EPERM), also for root."""
    folder = tmp_path / "locked"
    folder.mkdir()

    def refuse(call):
        def refusing(path, *args, **kwargs):
            if isinstance(path, (str, os.PathLike)) and os.path.abspath(path).startswith(str(folder) + os.sep):
                raise PermissionError(errno.EPERM, "Operation not permitted", os.fspath(path))
            return call(path, *args, **kwargs)
        return refusing

    monkeypatch.setattr(os, "mkdir", refuse(os.mkdir))
    monkeypatch.setattr(os, "open", refuse(os.open))
    return folder


def test_prepare_into_a_folder_that_refuses_writes_is_one_line(locked: Path, capsys) -> None:
    out = locked / "x.store"
    assert main(["prepare", LAMBDA, "--out", str(out)]) == 2
    line = error_line(capsys.readouterr().err)
    assert line == f"biomoe: error: {out}: operation not permitted"


@pytest.mark.slow
def test_fit_into_a_folder_that_refuses_writes_is_one_line(locked: Path, capsys) -> None:
    assert main(["fit", "--config", str(ROOT / "configs/tiny.yaml"), "--data.fasta", LAMBDA,
                 "--trainer.default_root_dir", str(locked / "runs")]) == 2
    line = error_line(capsys.readouterr().err)
    assert str(locked / "runs") in line and "operation not permitted" in line


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into read-only folders")
def test_prepare_into_a_read_only_folder_is_one_line(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        assert main(["prepare", LAMBDA, "--out", str(folder / "sub" / "x.store")]) == 2
    finally:
        folder.chmod(0o755)
    line = error_line(capsys.readouterr().err)
    assert str(folder / "sub") in line and "permission denied" in line.lower()
