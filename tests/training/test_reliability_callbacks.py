"""NonFiniteGuard (stop / skip, no poisoned checkpoint) and RouterCollapseMonitor on real tiny runs."""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from biomoe.training.guards.health import NonFiniteError, NonFiniteGuard, RouterCollapseMonitor
from biomoe.cli.lightning_cli import install_atomic_checkpoint_io
from biomoe.model.config import ModelConfig, OptimConfig
from biomoe.data.datamodule import GenomeDataModule
from biomoe.training.step.lightning_module import BioMoEModule
from helpers.recorder import PoisonForward
from conftest import ROOT


def _fit(tmp_path: Path, callbacks: list[L.Callback], max_steps: int, bias_rate: float = 0.0,
         module: BioMoEModule | None = None) -> tuple[L.Trainer, BioMoEModule]:
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                      ffn_hidden_size=32, router_bias_update_rate=bias_rate)
    module = module or BioMoEModule(cfg, OptimConfig(lr=3e-3, warmup_steps=2, max_steps=max_steps))
    dm = GenomeDataModule(fasta=str(ROOT / "data/lambda_virus.fa.gz"), seq_length=64, batch_size=4,
                          val_fraction=0.0, cache_dir=str(tmp_path / "cache"))
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=1, save_last=True)
    trainer = L.Trainer(accelerator="cpu", max_steps=max_steps, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=tmp_path,
                        callbacks=[*callbacks, ckpt])
    install_atomic_checkpoint_io(trainer)
    trainer.fit(module, datamodule=dm)
    return trainer, module


def _finite_checkpoint(path: Path) -> dict:
    state = torch.load(path, weights_only=False)  # hparams hold ModelConfig objects here
    assert all(torch.isfinite(v).all() for v in state["state_dict"].values() if v.is_floating_point())
    return state


def test_nan_stop_reports_step_and_parameters_and_keeps_last_checkpoint_clean(tmp_path: Path) -> None:
    with pytest.raises(NonFiniteError, match=r"^step 3: non-finite loss, non-finite gradients in model\."):
        _fit(tmp_path, [NonFiniteGuard("stop"), PoisonForward(step=3)], max_steps=6)
    last = _finite_checkpoint(tmp_path / "ckpt" / "last.ckpt")
    assert last["global_step"] == 3  # the last good step; nothing was saved after the NaN


def test_nan_skip_drops_the_update_and_training_continues(tmp_path: Path) -> None:
    guard = NonFiniteGuard("skip")
    snapshot: dict[str, torch.Tensor] = {}

    class Snapshot(L.Callback):  # weights right before and right after the poisoned step
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if trainer.global_step == 2:
                snapshot.update({k: v.clone() for k, v in pl_module.state_dict().items()})

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == 3:
                for key, value in pl_module.state_dict().items():
                    if key.endswith(".weight"):
                        assert torch.equal(value, snapshot[key]), f"{key} changed in a skipped step"

    with pytest.warns(UserWarning, match=r"step 2: non-finite loss.*skipping this optimizer step"):
        trainer, module = _fit(tmp_path, [guard, PoisonForward(step=2), Snapshot()], max_steps=5)
    assert guard.skipped_steps == [2]
    assert trainer.global_step == 5
    assert _finite_checkpoint(tmp_path / "ckpt" / "last.ckpt")["global_step"] == 5


def test_nan_skip_gives_up_after_consecutive_bad_steps(tmp_path: Path) -> None:
    poison = [PoisonForward(step=s) for s in (1, 2)]
    with pytest.raises(NonFiniteError, match="2 non-finite steps in a row"):
        _fit(tmp_path, [NonFiniteGuard("skip", max_consecutive_skips=1), *poison], max_steps=4)


def test_guard_refuses_to_write_checkpoint_with_nonfinite_weights() -> None:
    trainer = SimpleNamespace(global_step=7, strategy=SimpleNamespace(
        reduce_boolean_decision=lambda decision, all=True: decision))
    good = {"state_dict": {"a": torch.ones(2), "steps": torch.tensor(3)}}
    NonFiniteGuard().on_save_checkpoint(trainer, None, good)
    bad = {"state_dict": {"a": torch.ones(2), "model.blocks.0.w": torch.tensor([1.0, float("inf")])}}
    with pytest.raises(NonFiniteError, match=r"step 7: refusing .* model\.blocks\.0\.w"):
        NonFiniteGuard().on_save_checkpoint(trainer, None, bad)


def test_router_collapse_warns_once_naming_layer_and_expert(tiny_config, tmp_path: Path) -> None:
    cfg = tiny_config(router_bias_update_rate=1e-12)
    torch.manual_seed(0)
    module = BioMoEModule(cfg, OptimConfig(lr=1e-6, warmup_steps=2, max_steps=4))  # routing ~frozen
    module.configure_model()
    module.model.blocks[0].mlp.router.expert_bias[3] = -1e4  # layer 0, expert 3 is never selected
    monitor = RouterCollapseMonitor(threshold=0.05, patience=3, check_every_n_steps=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit(tmp_path, [monitor], max_steps=4, module=module)
    collapse = [str(w.message) for w in caught if "router collapse" in str(w.message)]
    forced = [m for m in collapse if "layer 0 expert 3 " in m]
    assert len(forced) == 1, "\n".join(collapse)  # not repeated while it stays collapsed
    assert "at step 3: layer 0 expert 3 received 0.00%" in forced[0]  # only after `patience` checks
    assert monitor.streaks[0][3] == 4  # (other experts may or may not starve: init-dependent)


def test_router_collapse_streak_resets_when_expert_recovers() -> None:
    monitor = RouterCollapseMonitor(threshold=0.1, patience=2, check_every_n_steps=1)
    for step, counts in enumerate([[10, 10, 10, 0], [10, 10, 10, 0], [9, 9, 9, 9], [10, 10, 10, 0]], 1):
        monitor._counts[1] = torch.tensor(counts, dtype=torch.float32)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warned = monitor.check(step)
        assert (warned == [(1, 3, 0.0)]) == (step == 2), (step, warned)
        assert len(caught) == (step == 2)
    assert monitor.streaks[1][3] == 1


def test_router_collapse_checks_once_per_optimizer_step_under_gradient_accumulation() -> None:
    """With accumulate_grad_batches=2 micro-batches end at global steps 0, 1, 1, 2, 2: patience
    counts optimizer steps, not micro-batches (and step 0, before any update, is not a check)."""
    monitor = RouterCollapseMonitor(threshold=0.1, patience=3, check_every_n_steps=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for global_step in [0, 1, 1, 2, 2]:
            counts = torch.tensor([10.0, 10.0, 10.0, 0.0])
            monitor._counts[0] = counts if 0 not in monitor._counts else monitor._counts[0] + counts
            monitor.on_train_batch_end(SimpleNamespace(global_step=global_step), None, None, None, 0)
    assert monitor.streaks[0][3] == 2  # two optimizer steps so far
    assert not [w for w in caught if "router collapse" in str(w.message)]  # patience 3 not reached


@pytest.mark.slow
def test_router_collapse_hooks_stay_eager_inside_compiled_blocks(tiny_config, caplog: pytest.LogCaptureFixture) -> None:
    """Traced by torch.compile, the monitor's per-layer hooks recompiled every block until torch's
    recompile limit; they must count routed tokens without adding a compilation per layer."""
    import logging

    from biomoe.model.transformer import MoETransformer

    cfg = tiny_config(num_layers=10)
    torch.manual_seed(0)
    model = MoETransformer(cfg).train()
    for block in model.blocks:
        block.compile(backend="eager")  # dynamo's tracing and guards, no code generation
    monitor = RouterCollapseMonitor(check_every_n_steps=1)
    monitor.on_train_start(SimpleNamespace(global_step=0), SimpleNamespace(model=model))
    tokens = torch.randint(4, 8, (2, 16))
    torch.compiler.reset()
    try:
        with caplog.at_level(logging.WARNING, logger="torch._dynamo"):
            for _ in range(2):
                model(tokens)
    finally:
        monitor.on_train_end(None, None)
        torch.compiler.reset()
    assert not [r for r in caplog.records if "recompile" in r.getMessage().lower()], caplog.text
    assert sorted(monitor._counts) == list(range(10))
    assert all(float(c.sum()) == 2 * 2 * 16 * 2 for c in monitor._counts.values())  # 2 passes x tokens x top-2
