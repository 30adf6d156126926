"""A checkpoint that passed verification is not read in full again while it is unchanged, and any
change to the file (replaced, rewritten in place, even with its mtime set back) is verified anew."""

from __future__ import annotations

import json
import os
import time
import zipfile
from pathlib import Path

import pytest
import torch

from biomoe.checkpoint import verified, verify
from biomoe.errors import GenomeInputError
from biomoe.model.config import ModelConfig
from biomoe.model.transformer import MoETransformer
from conftest import save_checkpoint

CFG = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                  ffn_hidden_size=32)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("BIOMOE_VERIFY_CACHE", raising=False)
    return tmp_path / "cache" / "biomoe" / "verified-checkpoints.json"


@pytest.fixture
def full_reads(monkeypatch) -> list[str]:
    """Names of the checks that read the whole file, one entry per run (they still run)."""
    calls: list[str] = []
    for name in ("check_integrity", "check_finite"):
        real = getattr(verify, name)
        monkeypatch.setattr(verify, name, lambda *a, _real=real, _name=name: (calls.append(_name), _real(*a))[1])
    return calls


def checkpoint(path: Path) -> Path:
    torch.manual_seed(0)
    return save_checkpoint(path, MoETransformer(CFG), CFG)


def flip_a_weight_bit(path: Path) -> None:
    """One bit flipped inside the largest tensor, in place (same inode, same size)."""
    with zipfile.ZipFile(path) as archive:
        member = max(archive.infolist(), key=lambda i: i.file_size)
    offset = member.header_offset + 30 + len(member.filename) + len(member.extra) + 17
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)[0]
        fh.seek(offset)
        fh.write(bytes([byte ^ 0x10]))


def test_a_file_verified_before_is_not_read_in_full_again(tmp_path, cache, full_reads, monkeypatch):
    monkeypatch.setattr(verified, "RACY_SECONDS", 0.0)  # the file was written before the check began
    path = checkpoint(tmp_path / "m.ckpt")
    first = verify.verify_checkpoint(path)
    assert full_reads == ["check_integrity", "check_finite"]
    assert cache.is_file() and json.loads(cache.read_text())[0]["path"] == os.path.realpath(path)
    again = verify.verify_checkpoint(path)
    assert full_reads == ["check_integrity", "check_finite"]  # not run again
    assert again.keys() == first.keys()
    torch.testing.assert_close(again["state_dict"], first["state_dict"])


def test_a_file_changed_in_place_with_its_mtime_set_back_is_verified_again(tmp_path, cache, full_reads,
                                                                             monkeypatch):
    monkeypatch.setattr(verified, "RACY_SECONDS", 0.0)
    path = checkpoint(tmp_path / "m.ckpt")
    verify.verify_checkpoint(path)
    before = os.stat(path)
    time.sleep(0.05)  # file times tick coarsely: let the change get a later ctime
    flip_a_weight_bit(path)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    with pytest.raises(GenomeInputError, match="fails its CRC check"):
        verify.verify_checkpoint(path)


def test_a_replaced_file_is_verified_again(tmp_path, cache, full_reads, monkeypatch):
    monkeypatch.setattr(verified, "RACY_SECONDS", 0.0)
    path = checkpoint(tmp_path / "m.ckpt")
    verify.verify_checkpoint(path)
    checkpoint(tmp_path / "other.ckpt").replace(path)
    verify.verify_checkpoint(path)
    assert full_reads == ["check_integrity", "check_finite"] * 2


def test_a_file_modified_just_before_its_check_is_not_recorded(tmp_path, cache, full_reads):
    """File times tick coarsely: a write in the same tick as the check could leave the same stamp."""
    path = checkpoint(tmp_path / "m.ckpt")
    verify.verify_checkpoint(path)
    verify.verify_checkpoint(path)
    assert full_reads == ["check_integrity", "check_finite"] * 2
    assert not cache.exists()


def test_a_bad_file_is_never_recorded(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(verified, "RACY_SECONDS", 0.0)
    path = checkpoint(tmp_path / "m.ckpt")
    flip_a_weight_bit(path)
    for _ in range(2):
        with pytest.raises(GenomeInputError, match="fails its CRC check"):
            verify.verify_checkpoint(path)
    assert not cache.exists()


def test_an_unreadable_or_disabled_cache_costs_only_the_full_check(tmp_path, cache, full_reads, monkeypatch):
    monkeypatch.setattr(verified, "RACY_SECONDS", 0.0)
    path = checkpoint(tmp_path / "m.ckpt")
    cache.parent.mkdir(parents=True)
    cache.write_text("{not json")
    verify.verify_checkpoint(path)
    assert json.loads(cache.read_text())[0]["path"] == os.path.realpath(path)  # replaced by a good one
    monkeypatch.setenv("BIOMOE_VERIFY_CACHE", "0")
    verify.verify_checkpoint(path)
    assert full_reads == ["check_integrity", "check_finite"] * 2


def test_the_records_are_bounded_oldest_dropped(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(verified, "RACY_SECONDS", 0.0)
    monkeypatch.setattr(verified, "MAX_RECORDS", 2)
    paths = [checkpoint(tmp_path / f"m{i}.ckpt") for i in range(3)]
    for path in paths:
        verify.verify_checkpoint(path)
    assert [r["path"] for r in json.loads(cache.read_text())] == [os.path.realpath(p) for p in paths[1:]]
