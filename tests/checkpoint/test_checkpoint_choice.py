"""A run folder and ``--ckpt_path best|last`` pick their checkpoint by one rule: the best by the
monitored metric, else the last, and say which on stderr."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from biomoe.checkpoint.run_folder import resolve_checkpoint
from biomoe.checkpoint.verify import resolve_checkpoint_alias
from biomoe.errors import GenomeInputError


def save(path: Path, age_s: int, best: Path | None = None, monitor: str | None = "val/bits_per_base",
         score: float = 1.9) -> Path:
    """A checkpoint whose ModelCheckpoint state records ``best``; older by ``age_s`` seconds."""
    callbacks = {}
    if best is not None:
        key = f"ModelCheckpoint{{'monitor': {monitor!r}}}"
        callbacks[key] = {"monitor": monitor, "best_model_path": str(best), "best_model_score": torch.tensor(score)}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {}, "callbacks": callbacks}, path)
    stamp = 1_700_000_000 - age_s
    os.utime(path, (stamp, stamp))
    return path


@pytest.fixture()
def run(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A fit's folder: the best checkpoint of step 20, a later epoch file, and last.ckpt recording the best."""
    ckpts = tmp_path / "run" / "version_0" / "checkpoints"
    best = ckpts / "step=20-bits=1.8800.ckpt"
    save(best, 30, best=best, score=1.88)
    save(ckpts / "step=40.ckpt", 10)  # newer than the best, but records nothing
    last = save(ckpts / "last.ckpt", 0, best=best, score=1.88)
    return tmp_path / "run", best, last


def test_run_folder_and_best_alias_agree_and_say_so(run, capsys) -> None:
    folder, best, _ = run
    assert resolve_checkpoint(folder) == str(best)
    assert resolve_checkpoint_alias("best", [folder]) == str(best)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all("best val/bits_per_base 1.8800" in line for line in err)


def test_last_alias_is_the_newest_last_checkpoint(run) -> None:
    folder, _, last = run
    assert resolve_checkpoint_alias("last", [folder], announce=None) == str(last)


def test_a_checkpoint_without_a_monitor_records_no_best(tmp_path: Path) -> None:
    ckpts = tmp_path / "checkpoints"
    newest_epoch = save(ckpts / "epoch=3.ckpt", 20)
    last = save(ckpts / "last.ckpt", 0, best=newest_epoch, monitor=None)
    for chosen in (resolve_checkpoint(tmp_path, announce=None), resolve_checkpoint_alias("best", [tmp_path], None)):
        assert chosen == str(last)


def test_a_recorded_best_that_is_gone_falls_back_to_last_and_says_why(tmp_path: Path) -> None:
    said: list[str] = []
    last = save(tmp_path / "last.ckpt", 0, best=tmp_path / "gone.ckpt")
    assert resolve_checkpoint_alias("best", [tmp_path], said.append) == str(last)
    assert "the recorded best gone.ckpt is gone; the last one" in said[0]


def test_a_moved_run_folder_finds_its_best_by_name(run, tmp_path: Path) -> None:
    folder, best, _ = run
    moved = tmp_path / "moved"
    folder.rename(moved)
    assert Path(resolve_checkpoint(moved, announce=None)).name == best.name


@pytest.mark.parametrize("alias", ["best", "last"])
def test_no_checkpoint_is_one_error(tmp_path: Path, alias: str) -> None:
    with pytest.raises(GenomeInputError, match=f"ckpt_path: '{alias}': no .*run fit first"):
        resolve_checkpoint_alias(alias, [tmp_path])
