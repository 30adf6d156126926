"""Inputs that change under biomoe are caught: the scan cache notices in-place edits, a FASTA cut
short or rewritten during training stops the run with one line, unusable entries of a FASTA
folder are warned about by name, and a ``.gzi`` of another file is rebuilt or refused."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from biomoe.cli.main import main
from biomoe.data.sources import fasta_index, fasta_prepare
from biomoe.data.sources.genome import Genome
from biomoe.errors import GenomeInputError
from conftest import ROOT, error_line as _error_line, fasta_text, random_dna

TINY = str(ROOT / "configs/tiny.yaml")


def _edit_keeping_size_and_mtime(path: Path, old: bytes, new: bytes) -> None:
    st = path.stat()
    data = path.read_bytes()
    assert len(old) == len(new) and old in data
    path.write_bytes(data.replace(old, new, 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


# ---------------------------------------------------------------------------------- scan cache
def test_in_place_edit_keeping_size_and_mtime_is_rescanned(tmp_path: Path, cache_dir: Path) -> None:
    path = tmp_path / "g.fa"
    seq = random_dna(5000, 1)
    path.write_text(fasta_text({"c1": seq}))
    assert Genome(path, cache_dir=cache_dir).names == ["c1"]
    _edit_keeping_size_and_mtime(path, seq[:8].encode(), b"J" + seq[1:8].encode())
    with pytest.raises(GenomeInputError, match="character 'J' outside IUPAC"):
        Genome(path, cache_dir=cache_dir)


def test_renamed_contig_with_same_size_and_mtime_is_seen(tmp_path: Path, cache_dir: Path) -> None:
    path = tmp_path / "g.fa"
    path.write_text(fasta_text({"c1": random_dna(3000, 2)}))
    Genome(path, cache_dir=cache_dir)
    _edit_keeping_size_and_mtime(path, b">c1", b">c9")
    genome = Genome(path, cache_dir=cache_dir)
    assert genome.names == ["c9"] and len(genome.fetch("c9", 0, 100)) == 100


def test_unchanged_file_still_uses_the_cache(tmp_path: Path, cache_dir: Path, monkeypatch) -> None:
    path = tmp_path / "g.fa.gz"
    import gzip

    path.write_bytes(gzip.compress(fasta_text({"c1": random_dna(3000, 3)}).encode()))
    Genome(path, cache_dir=cache_dir)
    monkeypatch.setattr(fasta_prepare, "scan_fasta", lambda p: pytest.fail("rescanned an unchanged file"))
    assert Genome(path, cache_dir=cache_dir).names == ["c1"]


# --------------------------------------------------------------------- changes during training
@pytest.mark.parametrize("change", ["truncate", "rewrite", "replace"])
def test_changed_file_stops_reads_with_one_line(tmp_path: Path, cache_dir: Path, change: str) -> None:
    path = tmp_path / "g.fa"
    path.write_text(fasta_text({"c1": random_dna(4000, 4)}))
    genome = Genome(path, cache_dir=cache_dir)
    assert len(genome.fetch("c1", 0, 50)) == 50
    if change == "truncate":
        with open(path, "r+b") as handle:
            handle.truncate(1000)
        expected = "size"
    elif change == "rewrite":
        _edit_keeping_size_and_mtime(path, b">c1", b">c2")
        expected = "changed while biomoe was reading it"
    else:
        replacement = tmp_path / "new.fa"
        replacement.write_text(fasta_text({"c1": random_dna(4000, 5)}))
        os.replace(replacement, path)
        expected = "replaced by another file"
    with pytest.raises(GenomeInputError, match=expected) as info:
        genome.fetch("c1", 3000, 3050)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("mode", ["truncate", pytest.param("rewrite", marks=pytest.mark.slow)])
def test_fasta_changed_during_fit_stops_with_one_line(tmp_path: Path, capsys, mode: str) -> None:
    path = tmp_path / "g.fa"
    path.write_text(fasta_text({"c1": random_dna(20_000, 6)}))
    code = main(["fit", "--config", TINY, "--data.fasta", str(path), "--data.cache_dir", str(tmp_path / "cache"),
                 "--trainer.default_root_dir", str(tmp_path / "run"), "--trainer.logger", "false",
                 "--trainer.max_steps", "5", "--trainer.val_check_interval", "5",
                 "--trainer.callbacks+", "helpers.mutate_input.TruncateFile", "--trainer.callbacks.path", str(path),
                 "--trainer.callbacks.step", "2", "--trainer.callbacks.mode", mode])
    assert code == 2
    line = _error_line(capsys.readouterr().err)
    assert line.startswith(f"biomoe: error: {path}: ") and "restart the run" in line


# -------------------------------------------------------------------------------- FASTA folders
def test_dangling_symlink_in_a_folder_is_warned_about_by_name(tmp_path: Path, cache_dir: Path) -> None:
    folder = tmp_path / "genomes"
    folder.mkdir()
    (folder / "a.fa").write_text(fasta_text({"a1": random_dna(500, 7)}))
    (folder / "b.fa").symlink_to(tmp_path / "moved-away.fa")
    (folder / "c.fa").mkdir()  # a folder with a FASTA name
    with pytest.warns(UserWarning) as record:
        genome = Genome(folder, cache_dir=cache_dir)
    messages = [str(w.message) for w in record]
    assert any(f"{folder / 'b.fa'}: dangling symlink" in m for m in messages), messages
    assert any(f"{folder / 'c.fa'}: not a regular file" in m for m in messages), messages
    assert genome.names == ["a1"]


def test_unreadable_entry_of_a_folder_is_warned_about(tmp_path: Path, cache_dir: Path, monkeypatch) -> None:
    folder = tmp_path / "genomes"
    folder.mkdir()
    (folder / "a.fa").write_text(fasta_text({"a1": random_dna(500, 8)}))
    locked = folder / "b.fa"
    locked.write_text(fasta_text({"b1": random_dna(500, 9)}))
    real_access = os.access  # root ignores chmod; os.access is what the folder listing asks
    monkeypatch.setattr(os, "access", lambda p, m: False if Path(p) == locked else real_access(p, m))
    with pytest.warns(UserWarning, match=f"{locked}: permission denied"):
        assert Genome(folder, cache_dir=cache_dir).names == ["a1"]


@pytest.mark.slow
def test_folder_warning_is_one_biomoe_line_on_the_terminal(tmp_path: Path) -> None:
    folder = tmp_path / "genomes"
    folder.mkdir()
    (folder / "a.fa").write_text(fasta_text({"a1": random_dna(3000, 10)}))
    (folder / "b.fa").symlink_to(tmp_path / "gone.fa")
    result = subprocess.run([sys.executable, str(ROOT / "cli.py"), "markov", str(folder), "--seq-length", "100",
                             "--max-order", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"biomoe: warning: {folder / 'b.fa'}: dangling symlink" in result.stderr
    assert "UserWarning" not in result.stderr


# ------------------------------------------------------------------------------------- .gzi files
def _bgzf(folder: Path, name: str, seed: int, length: int = 200_000) -> Path:
    from Bio import bgzf

    path = folder / name
    with bgzf.BgzfWriter(str(path), "wb") as handle:
        handle.write(fasta_text({"c1": random_dna(length, seed)}).encode())
    return path


def test_gzi_of_another_file_is_rebuilt(tmp_path: Path, cache_dir: Path) -> None:
    path = _bgzf(tmp_path, "g.fa.gz", 11)
    (tmp_path / "x").mkdir()
    other = _bgzf(tmp_path / "x", "o.fa.gz", 12, length=150_000)
    Genome(path, cache_dir=cache_dir)  # beside-file indexes are used only when present: make them
    Genome(other, cache_dir=cache_dir)
    shutil.copy(next(cache_dir.glob("g.fa.gz.*.fai")), str(path) + ".fai")
    gzi = Path(str(path) + ".gzi")
    shutil.copy(next(cache_dir.glob("o.fa.gz.*.gzi")), gzi)
    wrong = gzi.read_bytes()
    with pytest.warns(UserWarning, match=rf"index {re.escape(str(gzi))} did not match the file; rebuilt"):
        genome = Genome(path, cache_dir=cache_dir)
    assert gzi.read_bytes() != wrong  # rebuilt in place, and said
    assert fasta_index._gzi_matches(path, gzi)
    expected = fasta_text({"c1": random_dna(200_000, 11)}).split("\n", 1)[1].replace("\n", "")
    assert genome.fetch("c1", 150_000, 150_100) == expected[150_000:150_100]


def test_gzi_of_another_file_in_a_read_only_folder_is_refused(tmp_path: Path, cache_dir: Path,
                                                              monkeypatch) -> None:
    path = _bgzf(tmp_path, "g.fa.gz", 13)
    (tmp_path / "x").mkdir()
    other = _bgzf(tmp_path / "x", "o.fa.gz", 14, length=150_000)
    Genome(path, cache_dir=cache_dir)
    Genome(other, cache_dir=cache_dir)
    shutil.copy(next(cache_dir.glob("g.fa.gz.*.fai")), str(path) + ".fai")
    shutil.copy(next(cache_dir.glob("o.fa.gz.*.gzi")), str(path) + ".gzi")
    real_access = os.access
    monkeypatch.setattr(os, "access",
                        lambda p, m: False if Path(p) == tmp_path and m == os.W_OK else real_access(p, m))
    with pytest.raises(GenomeInputError, match=r"g\.fa\.gz\.gzi does not match the FASTA and cannot be rebuilt"):
        Genome(path, cache_dir=cache_dir)


def test_a_protein_fasta_is_named_as_protein(tmp_path):
    protein = tmp_path / "proteins.faa"
    protein.write_text(">sp|P0A7Z4|RPOA_ECOLI\nMQGSVTEFLKPRLVDIEQVSSTHAKVTLEPLERGFGHTLGNALRRILLSSMPG\n")
    with pytest.raises(GenomeInputError, match="looks like a protein"):
        Genome([protein])
    dna = tmp_path / "typo.fa"
    dna.write_text(">chr1\nACGTACGTJACGT\n")  # a stray letter in DNA is not called a protein
    with pytest.raises(GenomeInputError, match="outside IUPAC") as caught:
        Genome([dna])
    assert "looks like a protein" not in str(caught.value)


@pytest.fixture
def trained_at_64(tiny_config, tmp_path):
    import torch

    from biomoe.model.transformer import MoETransformer
    from conftest import save_checkpoint

    torch.manual_seed(0)
    cfg = tiny_config(num_layers=1)
    return save_checkpoint(tmp_path / "m.ckpt", MoETransformer(cfg), cfg, data={"seq_length": 64})


def test_windows_past_the_training_length_or_without_context_are_not_silent(trained_at_64, write_fasta,
                                                                             tmp_path, capsys):
    fasta = write_fasta({"c": random_dna(300, seed=5)})
    common = ["score-fasta", str(trained_at_64), str(fasta), "--device", "cpu", "--no-progress"]
    assert main([*common, "--out", str(tmp_path / "long"), "--window", "256"]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if line.startswith("biomoe: warning:")]
    assert len(warned) == 1 and "--window 256" in warned[0] and "64 bases the model was trained on" in warned[0]
    assert main([*common, "--out", str(tmp_path / "none"), "--window", "1"]) == 2
    assert "--window 1: every base would be read with no context" in _error_line(capsys.readouterr().err)
    assert not (tmp_path / "none.tsv").exists()
    assert main([*common, "--out", str(tmp_path / "same"), "--window", "64"]) == 0
    assert "biomoe: warning:" not in capsys.readouterr().err


def test_a_precision_this_cpu_cannot_run_lists_fp32_among_what_works(trained_at_64, write_fasta, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the CPU's answer")
    fasta = write_fasta({"c": random_dna(100, seed=5)})
    assert main(["score-fasta", str(trained_at_64), str(fasta), "--out", str(tmp_path / "s"), "--device", "cpu",
                 "--precision", "fp8-current"]) == 2
    line = _error_line(capsys.readouterr().err)
    assert "--precision fp8-current" in line and "precisions that work here: fp32, bf16" in line
