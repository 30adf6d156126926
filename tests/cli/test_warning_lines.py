"""Repeated warnings of one kind are one line with a count and the bases they concern, so a draft
assembly of hundreds of contigs or files does not flood the screen; ``--verbose-warnings`` shows each."""

from __future__ import annotations

import torch

from biomoe.cli.main import main as cli_main
from biomoe.cli.warning_lines import WarningLines
from biomoe.model.transformer import MoETransformer
from conftest import random_dna, save_checkpoint

LONG = {f"chr{i}": random_dna(3000, seed=100 + i) for i in range(2)}


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("biomoe: warning:")]


def test_repeats_of_one_kind_become_a_count_with_their_bases(capsys):
    lines = WarningLines()
    for i, length in enumerate((103, 88, 12)):
        lines.show(f"train: skipping contig 'contig_{i}' ({length} bp < seq_length 512)")
    lines.show("data/a.fa: skipped 2 record(s) with no sequence")
    lines.finish()
    shown = _warnings(capsys.readouterr().err)
    assert shown[0] == "biomoe: warning: train: skipping contig 'contig_0' (103 bp < seq_length 512)"
    assert len(shown) == 3, shown
    summary = shown[2]
    assert "3 in all" in summary and "203 bp" in summary and "seq_length 512" in summary
    assert "contig_0, contig_1, contig_2" in summary and "--verbose-warnings" in summary


def test_verbose_warnings_show_each():
    lines = WarningLines(verbose=True)
    for i in range(3):
        lines.show(f"train: skipping contig 'c{i}' ({i + 1} bp < seq_length 512)")
    assert lines.summary_lines() == []


def test_markov_on_many_files_with_empty_records_prints_two_warning_lines(tmp_path, capsys):
    folder = tmp_path / "assembly"
    folder.mkdir()
    for i in range(30):
        (folder / f"part_{i}.fa").write_text(f">empty_{i}\n>chr{i}\n{random_dna(400, seed=i)}\n")
    args = ["markov", str(folder), "--seq-length", "64", "--max-order", "2", "--val-fraction", "0.2"]
    assert cli_main(args) == 0
    shown = _warnings(capsys.readouterr().err)
    assert len(shown) == 2, shown  # the first, then the count of all
    assert "no sequence" in shown[0] and "30 in all" in shown[1] and "part_0.fa" in shown[1]
    assert cli_main(args + ["--verbose-warnings"]) == 0
    assert len(_warnings(capsys.readouterr().err)) == 30


def test_markov_from_a_checkpoint_names_its_fasta_as_a_path(tiny_config, write_fasta, tmp_path, capsys):
    fasta = write_fasta(LONG)
    cfg = tiny_config(num_layers=1)
    torch.manual_seed(0)
    ckpt = save_checkpoint(tmp_path / "m.ckpt", MoETransformer(cfg), cfg,
                           data={"fasta": str(fasta), "seq_length": 64, "val_fraction": 0.2})
    assert cli_main(["markov", "--ckpt_path", str(ckpt), "--max-order", "2"]) == 0
    (first,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("order-k Markov on")]
    assert first.startswith(f"order-k Markov on {fasta}:"), first


def _lightning_notices() -> list[str]:
    """The messages Lightning warns with when biomoe's EMA callback sets up a model built in
    ``configure_model``, and when it summarises a model trained in bf16-mixed."""
    import warnings

    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import WeightAveraging
    from lightning.pytorch.utilities.model_summary import ModelSummary

    class Built(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)

        def configure_model(self) -> None:
            pass

    module = Built()
    module.trainer = pl.Trainer(precision="bf16-mixed", accelerator="cpu", logger=False, enable_progress_bar=False,
                                enable_checkpointing=False, enable_model_summary=False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cli_main(["recipes"])  # a command: main() installs its warning filters
        WeightAveraging().setup(module.trainer, module, "fit")
        ModelSummary(module)
    return [str(w.message) for w in seen]


def test_lightning_notices_a_user_cannot_act_on_are_not_shown(capsys):
    shown = _lightning_notices()
    capsys.readouterr()
    assert not [m for m in shown if "may run out of memory" in m or "not supported by the model summary" in m], shown


def test_the_quieted_notices_are_still_what_lightning_says(monkeypatch):
    """Were Lightning to reword them, the filters would stop matching silently: the same calls
    without the filters must still raise both."""
    import biomoe.cli.warning_lines as warning_lines

    monkeypatch.setattr(warning_lines, "QUIET_WARNINGS", ())
    shown = _lightning_notices()
    assert any("WeightAveraging doesn't support sharding" in m for m in shown), shown
    assert any("Precision bf16-mixed is not supported by the model summary" in m for m in shown), shown
