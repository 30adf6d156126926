"""notebooks/explore.ipynb runs top to bottom against a freshly trained tiny model."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from biomoe.training.reports.markov_baseline import MarkovBaseline  # noqa: E402
from biomoe.model.config import OptimConfig  # noqa: E402
from biomoe.data.datamodule import GenomeDataModule  # noqa: E402
from biomoe.training.step.lightning_module import BioMoEModule  # noqa: E402
from conftest import ROOT  # noqa: E402


@pytest.fixture(scope="module")
def tiny_run(tiny_config, tmp_path_factory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("nb")
    torch.manual_seed(0)
    cfg = tiny_config()
    module = BioMoEModule(cfg, OptimConfig(lr=3e-3, warmup_steps=2), log_expert_load_every_n_steps=2)
    dm = GenomeDataModule(fasta=str(ROOT / "data/lambda_virus.fa.gz"), seq_length=128, batch_size=8)
    trainer = L.Trainer(accelerator="cpu", max_steps=8, val_check_interval=4, limit_val_batches=2,
                        log_every_n_steps=2, enable_progress_bar=False, enable_model_summary=False,
                        logger=CSVLogger(out, name=""), callbacks=[MarkovBaseline(order=3)],
                        default_root_dir=out)
    trainer.fit(module, datamodule=dm)
    ckpt = out / "tiny.ckpt"
    trainer.save_checkpoint(ckpt)
    return ckpt, next(out.rglob("metrics.csv"))


def write_yeast_gff(path: Path) -> Path:
    """A made-up annotation of yeast chrI (CDS every few kb, both strands): real coordinates are not
    bundled, and the notebook's panel only needs a GFF3 in the right shape."""
    from biomoe.data.sources.genome import Genome

    contig = Genome(ROOT / "data/yeast_chrI.fna.gz").contigs[0]
    rows = ["##gff-version 3"]
    for i, start in enumerate(range(1_000, contig.length - 2_000, 4_000)):
        rows.append(f"{contig.name}\tmade-up\tCDS\t{start}\t{start + 1_499}\t.\t{'+-'[i % 2]}\t0\tID=cds{i}")
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("with_gff", [False, True], ids=["no-annotation", "gff"])
@pytest.mark.slow
def test_explore_notebook_executes(tiny_run, monkeypatch, tmp_path, with_gff):
    ckpt, metrics = tiny_run
    monkeypatch.setenv("BIOMOE_CKPT", str(ckpt))
    monkeypatch.setenv("BIOMOE_METRICS", str(metrics))
    if with_gff:
        monkeypatch.setenv("BIOMOE_GFF", str(write_yeast_gff(tmp_path / "chrI.gff3")))
    else:
        monkeypatch.delenv("BIOMOE_GFF", raising=False)
    nb = nbformat.read(ROOT / "notebooks/explore.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    assert str(ckpt) in text  # it used the checkpoint it was given
    assert "llr" in text and "repeat_share" in text and "Markov:" in text
    assert "mixed_bits_per_base" in text  # section 5 found the run's training FASTA and scored it
    if with_gff:
        assert "coding_share" in text and "is coding (CDS)" in text
    else:
        assert "coding vs non-coding: skipped" in text
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 5
