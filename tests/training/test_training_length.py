"""Training length in passes over the training split, and the best checkpoint chosen from a run folder."""

from __future__ import annotations

import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

from biomoe.data.datamodule import GenomeDataModule
from biomoe.checkpoint.run_folder import resolve_checkpoint
from biomoe.inference.load import load_model
from biomoe.inference.scoring import sequence_log_likelihood
from biomoe.model.config import ConfigError, ModelConfig, OptimConfig
from biomoe.training.guards.training_length import TrainingLength, steps_for_passes
from biomoe.training.step.lightning_module import BioMoEModule
from conftest import random_dna

TINY = ModelConfig(hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                   ffn_hidden_size=32)


def test_steps_follow_passes_and_the_validation_interval() -> None:
    assert steps_for_passes(2.0, 10_000, 1_000) == (20, None)
    assert steps_for_passes(2.0, 4_000, 1_000) == (8, None)  # a genome 2.5x smaller: 2.5x fewer steps
    assert steps_for_passes(2.0, 10_000, 1_000, evaluations=3) == (21, 7)  # rounded up: last step validated
    assert steps_for_passes(2.0, 10_000, 1_000, evaluations=3, cap=15) == (15, 5)
    assert steps_for_passes(2.0, 10_000, 1_000, evaluations=4, cap=15) == (12, 4)
    assert steps_for_passes(1e-9, 10_000, 1_000) == (1, None)
    with pytest.raises(ConfigError, match="passes must be > 0"):
        TrainingLength(passes=0)


def datamodule(path: Path, cache_dir: Path, **kw) -> GenomeDataModule:
    fasta = [str(p) for p in path] if isinstance(path, list) else str(path)
    args = dict(fasta=fasta, seq_length=64, batch_size=4, rc_prob=0.0, val_fraction=0.1, cache_dir=str(cache_dir))
    args.update(kw)
    return GenomeDataModule(**args)


def fit(tmp_path: Path, dm: GenomeDataModule, callbacks, max_steps: int = -1, **kw) -> tuple[L.Trainer, BioMoEModule]:
    torch.manual_seed(0)
    module = BioMoEModule(TINY, OptimConfig(lr=3e-3, warmup_steps=2, min_lr_ratio=0.1))
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path, callbacks=callbacks,
                        max_steps=max_steps, check_val_every_n_epoch=None, num_sanity_val_steps=0, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, datamodule=dm)
    return trainer, module


class CountValidations(L.Callback):
    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_validation_end(self, trainer, pl_module) -> None:
        self.steps.append(trainer.global_step)


@pytest.mark.parametrize("length", [8_000, 20_000])
def test_fit_runs_the_passes_and_decays_the_schedule_over_them(write_fasta, cache_dir, tmp_path, length) -> None:
    dm = datamodule(write_fasta({"c": random_dna(length, 1)}), cache_dir)
    length_cb, seen = TrainingLength(passes=0.5, evaluations=3), CountValidations()
    trainer, module = fit(tmp_path, dm, [length_cb, seen], enable_checkpointing=False)
    train_bases = int(length * 0.9)
    expected, interval = steps_for_passes(0.5, train_bases, 4 * 64, evaluations=3)
    assert dm.train_bases == train_bases
    assert trainer.global_step == length_cb.max_steps == expected
    assert seen.steps == [interval, 2 * interval, 3 * interval]  # the last step is validated
    lr = trainer.optimizers[0].param_groups[0]["lr"]
    assert lr == pytest.approx(module.optim.lr * module.optim.min_lr_ratio, rel=0.1)  # fully decayed


def test_configured_max_steps_caps_the_length(write_fasta, cache_dir, tmp_path) -> None:
    dm = datamodule(write_fasta({"c": random_dna(20_000, 2)}), cache_dir)
    length_cb = TrainingLength(passes=5.0, evaluations=None)
    trainer, _ = fit(tmp_path, dm, [length_cb], max_steps=6, enable_checkpointing=False, val_check_interval=3)
    assert trainer.global_step == length_cb.max_steps == 6


def test_run_folder_gives_the_best_checkpoint_not_the_last(write_fasta, cache_dir, tmp_path, capsys) -> None:
    """Trained on an A/T-rich sequence and validated on uniform random DNA, held-out bits/base first
    fall (the model learns that only A/C/G/T occur) and then rise (it learns the A/T bias): the best
    checkpoint is an early one. A run folder must resolve to it, and
    its weights must score what ModelCheckpoint recorded."""
    train = write_fasta({"t": random_dna(10_000, 7, alphabet="AAAT")}, name="train.fa")
    unrelated = write_fasta({"u": random_dna(3_000, 3)}, name="unrelated.fa")
    dm = datamodule([train, unrelated], cache_dir, val_files=["unrelated"], val_fraction=0.0, seq_length=64)
    # As configs/genome.yaml keeps them: the best checkpoint, and the latest state as last.ckpt.
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "run" / "checkpoints", monitor="val/bits_per_base", mode="min",
                                 save_top_k=1, filename="best-step{step}")
    latest = ModelCheckpoint(dirpath=tmp_path / "run" / "checkpoints", filename="last", save_top_k=1)
    scores = CountValidations()
    trainer, _ = fit(tmp_path, dm, [TrainingLength(passes=2.0, evaluations=8), checkpoint, latest, scores])
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert last.exists() and len(scores.steps) == 8
    assert torch.load(last, weights_only=False)["global_step"] == trainer.global_step
    assert len(list(last.parent.glob("*.ckpt"))) == 2
    chosen = Path(resolve_checkpoint(tmp_path / "run"))
    assert chosen.resolve() == Path(checkpoint.best_model_path).resolve() and chosen.name != "last.ckpt"
    assert f"(best val/bits_per_base {float(checkpoint.best_model_score):.4f})" in capsys.readouterr().err
    # The chosen weights score the recorded best; the last ones score worse.
    # validation reads the held-out file packed: 46 pieces of 64 bases and its 56-base end, each its own document
    held_out = [dm.genome.fetch("u", s, min(s + 64, 3_000)) for s in range(0, 3_000, 64)]

    def bits(path: Path) -> float:
        ll = sequence_log_likelihood(load_model(path), held_out, batch_size=16)
        return -float(sum(x.sum() for x in ll)) / sum(len(x) for x in ll) / 0.6931471805599453

    assert bits(chosen) == pytest.approx(float(checkpoint.best_model_score), rel=1e-4)
    assert bits(last) > bits(chosen)
    # load_model given the folder takes the same weights.
    folder_model, file_model = load_model(tmp_path / "run"), load_model(chosen)
    assert all(torch.equal(a, b) for a, b in zip(folder_model.state_dict().values(), file_model.state_dict().values()))


def test_run_folder_without_a_recorded_best_falls_back(tmp_path, capsys) -> None:
    folder = tmp_path / "run" / "version_0" / "checkpoints"
    folder.mkdir(parents=True)
    torch.save({"state_dict": {}}, folder / "last.ckpt")
    assert Path(resolve_checkpoint(tmp_path / "run")).name == "last.ckpt"
    assert "no best checkpoint recorded" in capsys.readouterr().err
    torch.save({"state_dict": {}}, folder / "best-step10.ckpt")
    assert Path(resolve_checkpoint(tmp_path / "run")).name == "best-step10.ckpt"
    from biomoe.errors import GenomeInputError

    (tmp_path / "empty").mkdir()
    with pytest.raises(GenomeInputError, match="holds no checkpoint"):
        resolve_checkpoint(tmp_path / "empty")


def test_early_stopping_ends_a_run_whose_validation_turns_up(write_fasta, cache_dir, tmp_path) -> None:
    train = write_fasta({"t": random_dna(10_000, 7, alphabet="AAAT")}, name="train.fa")
    unrelated = write_fasta({"u": random_dna(3_000, 3)}, name="unrelated.fa")
    dm = datamodule([train, unrelated], cache_dir, val_files=["unrelated"], val_fraction=0.0)
    stop = EarlyStopping(monitor="val/bits_per_base", mode="min", patience=2)
    seen, length_cb = CountValidations(), TrainingLength(passes=2.0, evaluations=8)
    trainer, _ = fit(tmp_path, dm, [length_cb, stop, seen], enable_checkpointing=False)
    assert trainer.global_step < length_cb.max_steps and len(seen.steps) < 8  # stopped before the end
    assert stop.wait_count >= stop.patience


def test_init_weights_starts_a_fresh_run_from_another_runs_weights(write_fasta, cache_dir, tmp_path) -> None:
    """Fine-tuning: the pretrained weights, but step 0, a new optimizer and the new data's length."""
    from biomoe.errors import GenomeInputError
    from biomoe.training.optimization.init_weights import InitWeights

    first = datamodule(write_fasta({"c": random_dna(8_000, 1)}, name="first.fa"), cache_dir)
    latest = ModelCheckpoint(dirpath=tmp_path / "pre" / "checkpoints", filename="last", save_top_k=1)
    pre_trainer, pre = fit(tmp_path / "pre", first, [TrainingLength(passes=0.5, evaluations=1), latest])
    weights = {k: v.clone() for k, v in pre.model.state_dict().items()}

    second = datamodule(write_fasta({"d": random_dna(4_000, 2)}, name="second.fa"), cache_dir)
    torch.manual_seed(1)
    module = BioMoEModule(TINY, OptimConfig(lr=0.0, warmup_steps=1))
    init = InitWeights(str(tmp_path / "pre"))  # a run folder: its checkpoint
    from lightning.pytorch.callbacks import EMAWeightAveraging

    # The average listed first: it must still start from the loaded weights, not the random ones.
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path / "ft",
                        callbacks=[EMAWeightAveraging(device="cpu", decay=0.9, use_buffers=False), init,
                                   TrainingLength(passes=0.1, evaluations=None)], limit_val_batches=0)
    trainer.fit(module, datamodule=second)
    assert init.loaded_from == str(tmp_path / "pre" / "checkpoints" / "last.ckpt")
    assert 0 < trainer.global_step < pre_trainer.global_step  # a new, shorter run: not resumed
    # lr 0: the weights stay the loaded ones, and so does the average copied in at the end (up to rounding)
    params = dict(module.model.named_parameters())
    assert params and all(torch.allclose(p, weights[name], atol=1e-6) for name, p in params.items())

    wider = BioMoEModule(ModelConfig(hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=2, num_experts=4,
                                     top_k=2, ffn_hidden_size=32), OptimConfig())
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path / "bad",
                        callbacks=[InitWeights(str(tmp_path / "pre"))], max_steps=1)
    with pytest.raises(GenomeInputError, match="in the checkpoint, .* in this model"):
        trainer.fit(wider, datamodule=second)
