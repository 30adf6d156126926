"""``fit --ckpt_path last`` resumes a run on a prepared store only while the store holds the same
data: the checkpoint records what the store held (the checksums its manifest records), not only
its path, and a store rebuilt at that path from other genomes is refused in one line."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from biomoe.cli.main import main
from biomoe.data.sources.store_prepare import prepare_store
from conftest import ROOT, error_line


def _genome(seed: int) -> dict[str, str]:
    rng = np.random.default_rng(seed)
    return {f"chr{seed}": "".join(rng.choice(list("ACGT"), 20_000))}


def _prepare(fasta: Path, store: Path, cache_dir: Path) -> None:
    shutil.rmtree(store, ignore_errors=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepare_store([fasta], store, cache_dir=cache_dir, say=lambda _: None)


def _fit(store: Path, root: Path, cache_dir: Path, *extra: str) -> int:
    return main(["fit", "--config", str(ROOT / "configs/tiny.yaml"), "--data.fasta", str(store),
                 "--data.cache_dir", str(cache_dir), "--data.max_train_windows", "16",
                 "--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "1",
                 "--trainer.default_root_dir", str(root), *extra])


@pytest.mark.slow
def test_a_store_rebuilt_from_other_genomes_at_the_same_path_is_not_resumed(tmp_path, write_fasta, cache_dir,
                                                                             capsys) -> None:
    first = write_fasta(_genome(1), name="first.fa")
    other = write_fasta(_genome(2), name="other.fa")
    store = tmp_path / "g.store"
    root = tmp_path / "runs"
    _prepare(first, store, cache_dir)
    assert _fit(store, root, cache_dir) == 0

    _prepare(first, store, cache_dir)  # the same genomes prepared again: the same data
    capsys.readouterr()
    assert _fit(store, root, cache_dir, "--trainer.max_steps", "3", "--ckpt_path", "last") == 0
    assert "same data, model and precision" in capsys.readouterr().err

    _prepare(other, store, cache_dir)  # other genomes, same path
    assert _fit(store, root, cache_dir, "--trainer.max_steps", "4", "--ckpt_path", "last") == 2
    line = error_line(capsys.readouterr().err)
    assert "holds other data than when the checkpoint was written" in line and str(store.name) in line, line


def test_the_checkpoint_records_what_the_store_holds_and_resume_compares_it(tmp_path, write_fasta,
                                                                            cache_dir) -> None:
    from jsonargparse import Namespace

    from biomoe.cli.run.resume import checkpoint_identity, differences, run_identity
    from biomoe.data.datamodule import GenomeDataModule

    store = tmp_path / "g.store"
    _prepare(write_fasta(_genome(1), name="first.fa"), store, cache_dir)
    checkpoint = {"datamodule_hyper_parameters": {"fasta": str(store)},
                  GenomeDataModule.__qualname__: GenomeDataModule(fasta=str(store)).state_dict()}
    command = Namespace(data=Namespace(fasta=str(store)), model=Namespace(), trainer=Namespace(precision="32-true"))
    assert differences(run_identity(command), checkpoint_identity(checkpoint)) == []
    _prepare(write_fasta(_genome(2), name="other.fa"), store, cache_dir)
    found = differences(run_identity(command), checkpoint_identity(checkpoint))
    assert len(found) == 1 and found[0].startswith("data.fasta: the store") and "holds other data" in found[0]
    shutil.rmtree(store)
    assert "no store there now" in differences(run_identity(command), checkpoint_identity(checkpoint))[0]
