"""The training step does not make the host wait for the device, and the guards still act on NaN.

On a GPU every read of a device value on the host (``.item()``, ``bool(t)``, ``float(t)``,
``.tolist()``, ``.cpu()``) waits for all queued kernels. Here, on a CPU, the same calls are
counted while steps that are neither logging nor checking steps run: there must be none. The
NaN guard keeps its flags on the device and looks every ``check_every_n_steps`` steps, before each
checkpoint and at the end of fit; the tests below pin down when it stops, what it skips, and that
a fused optimizer skips the bad update on the device without the host deciding.
"""

from __future__ import annotations

import traceback
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from biomoe.data.datamodule import GenomeDataModule
from biomoe.model.config import ModelConfig, OptimConfig
from biomoe.training.guards.health import NonFiniteError, NonFiniteGuard, RouterCollapseMonitor, nonfinite_per_tensor
from biomoe.cli.lightning_cli import install_atomic_checkpoint_io
from biomoe.training.step.lightning_module import BioMoEModule
from helpers.recorder import PoisonForward
from conftest import ROOT

HOST_READS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "cpu", "numpy")


def _module(fused: bool, max_steps: int, bias_rate: float = 0.0, log_load_every: int = 50) -> BioMoEModule:
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                      ffn_hidden_size=32, router_bias_update_rate=bias_rate)
    return BioMoEModule(cfg, OptimConfig(lr=3e-3, warmup_steps=2, max_steps=max_steps, fused=fused),
                        log_expert_load_every_n_steps=log_load_every)


def _fit(tmp_path: Path, module: BioMoEModule, callbacks: list[L.Callback], max_steps: int,
         checkpoint_every: int | None = None, log_every: int = 50, clip: float | None = 1.0) -> L.Trainer:
    dm = GenomeDataModule(fasta=str(ROOT / "data/lambda_virus.fa.gz"), seq_length=64, batch_size=4,
                          val_fraction=0.0, cache_dir=str(tmp_path / "cache"))
    extra: list[L.Callback] = []
    if checkpoint_every:
        extra.append(ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=checkpoint_every,
                                     save_last=True))
    trainer = L.Trainer(accelerator="cpu", max_steps=max_steps, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=tmp_path,
                        enable_checkpointing=bool(checkpoint_every), log_every_n_steps=log_every,
                        gradient_clip_val=clip, callbacks=[*callbacks, *extra])
    install_atomic_checkpoint_io(trainer)
    trainer.fit(module, datamodule=dm)
    return trainer


class Snapshot(L.Callback):
    """Weights at the start of step ``step``, and whether they equal them at the end of ``until``."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.before: dict[str, torch.Tensor] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            self.before = {k: v.clone() for k, v in pl_module.state_dict().items() if k.endswith(".weight")}

    def unchanged(self, pl_module: L.LightningModule) -> bool:
        now = pl_module.state_dict()
        return all(torch.equal(now[k], v) for k, v in self.before.items())


# ------------------------------------------------------------------------------ NonFiniteGuard
def test_nonfinite_per_tensor_flags_nan_and_inf_in_any_dtype():
    tensors = [torch.ones(3), torch.tensor([1.0, float("nan")]), torch.ones(2, dtype=torch.bfloat16),
               torch.tensor([float("-inf")], dtype=torch.bfloat16), torch.zeros(0)]
    assert nonfinite_per_tensor(tensors).tolist() == [False, True, False, True, False]
    assert nonfinite_per_tensor([]) is None


@pytest.mark.parametrize("fused", [False, True])
def test_stop_is_raised_at_the_next_check_naming_the_bad_step(tmp_path: Path, fused: bool):
    """NaN at step 5, checks every 4 steps, no checkpoints: raised at global step 8 for step 5."""
    seen: list[int] = []

    class Steps(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.append(trainer.global_step)

    with pytest.raises(NonFiniteError, match=r"^step 5: non-finite loss, non-finite gradients in model\."):
        _fit(tmp_path, _module(fused, 12), [NonFiniteGuard("stop", check_every_n_steps=4),
                                            PoisonForward(step=5), Steps()], max_steps=12)
    assert seen[-1] == 7  # steps 6 and 7 ran before the look at the end of step 7 (global step 8)


def test_stop_with_fused_optimizer_applies_nothing_from_the_bad_step_on(tmp_path: Path):
    """torch's fused AdamW skips its update on the device: the weights at the stop are exactly those
    from before the bad step, although three more steps ran before the host looked."""
    module, snap = _module(True, 12), Snapshot(step=5)
    with pytest.raises(NonFiniteError, match=r"^step 5: non-finite loss") as info:
        _fit(tmp_path, module, [NonFiniteGuard("stop", check_every_n_steps=4), PoisonForward(step=5), snap],
             max_steps=12)
    assert "weights already non-finite" not in str(info.value)
    assert snap.unchanged(module)
    optimizer = module.trainer.optimizers[0]
    assert not hasattr(optimizer, "found_inf")  # the flag is handed over for one step only
    steps = {float(s["step"]) for s in optimizer.state.values()}
    assert steps == {5.0}  # steps 0-4 applied, 5-7 skipped by the kernel


def test_stop_without_device_skip_never_checkpoints_after_the_bad_step(tmp_path: Path):
    """Plain AdamW cannot skip on the device, so the bad update reaches the weights in memory; the
    look before every save stops the run before such a checkpoint is written."""
    with pytest.raises(NonFiniteError, match=r"^step 3: .*weights already non-finite"):
        _fit(tmp_path, _module(False, 8), [NonFiniteGuard("stop", check_every_n_steps=50), PoisonForward(step=3)],
             max_steps=8, checkpoint_every=1)
    last = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert last["global_step"] == 3
    assert all(torch.isfinite(v).all() for v in last["state_dict"].values() if v.is_floating_point())


def test_nan_in_the_last_steps_is_reported_at_the_end_of_fit(tmp_path: Path):
    with pytest.raises(NonFiniteError, match=r"^step 4: "):
        _fit(tmp_path, _module(True, 5), [NonFiniteGuard("stop", check_every_n_steps=50), PoisonForward(step=4)],
             max_steps=5)


def test_skip_with_fused_optimizer_drops_the_update_on_the_device(tmp_path: Path):
    module, snap = _module(True, 6), Snapshot(step=2)
    guard = NonFiniteGuard("skip", check_every_n_steps=4)

    class Unchanged(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == 3:  # right after the poisoned step's (skipped) update
                assert snap.unchanged(pl_module)
                assert guard.skipped_steps == []  # not looked at yet: the check is at step 4

    with pytest.warns(UserWarning, match=r"step 2: non-finite loss.*skipping this optimizer step"):
        trainer = _fit(tmp_path, module, [guard, PoisonForward(step=2), snap, Unchanged()], max_steps=6)
    assert guard.skipped_steps == [2]
    assert trainer.global_step == 6
    assert {float(s["step"]) for s in trainer.optimizers[0].state.values()} == {5.0}
    assert all(torch.isfinite(p).all() for p in module.parameters())


def test_skip_gives_up_after_consecutive_bad_steps_on_the_device(tmp_path: Path):
    poison = [PoisonForward(step=s) for s in (1, 2, 3)]
    with pytest.raises(NonFiniteError, match="3 non-finite steps in a row"):
        _fit(tmp_path, _module(True, 8), [NonFiniteGuard("skip", max_consecutive_skips=2, check_every_n_steps=4),
                                          *poison], max_steps=8)


# --------------------------------------------------------------------------- no host reads per step
class HostReadCounter(L.Callback):
    """Counts host reads of tensors from the start of a batch until the module's own
    ``on_train_batch_end`` has run, for batches that start at ``steps``."""

    def __init__(self, module: L.LightningModule, steps: set[int]) -> None:
        self.steps = steps
        self.reads: list[str] = []
        self._saved: dict[str, object] = {}
        original = module.on_train_batch_end

        def wrapped(*args, **kwargs):
            try:
                return original(*args, **kwargs)
            finally:
                self._stop()

        module.on_train_batch_end = wrapped

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step in self.steps:
            self._start(trainer.global_step)

    def _start(self, step: int) -> None:
        for name in HOST_READS:
            original = getattr(torch.Tensor, name)
            self._saved[name] = original

            def counting(tensor, *args, _name=name, _original=original, **kwargs):
                where = "".join(traceback.format_stack(limit=6)[:-1])
                self.reads.append(f"step {step}: Tensor.{_name}\n{where}")
                return _original(tensor, *args, **kwargs)

            setattr(torch.Tensor, name, counting)

    def _stop(self) -> None:
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)
        self._saved.clear()

    def on_exception(self, trainer, pl_module, exception):
        self._stop()


def test_ordinary_steps_read_nothing_from_the_device(tmp_path: Path):
    """Shipped callbacks, gradient clipping, router bias updates, logging: steps 1-3 (between the
    first step and the first logging/check step at 5) never read a tensor on the host."""
    module = _module(True, 7, bias_rate=1e-3, log_load_every=5)
    counter = HostReadCounter(module, steps={1, 2, 3})
    callbacks = [NonFiniteGuard("stop", check_every_n_steps=5),
                 RouterCollapseMonitor(threshold=0.02, patience=3, check_every_n_steps=5), counter]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _fit(tmp_path, module, callbacks, max_steps=7, log_every=5)
    assert not counter.reads, "\n\n".join(counter.reads[:3])


def test_the_counter_sees_a_host_read(tmp_path: Path):
    """Guards the test above: a callback that reads the loss every step is caught."""

    class ReadsLoss(L.Callback):
        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            float(pl_module._last_loss)

    module = _module(True, 4)
    counter = HostReadCounter(module, steps={1, 2})
    _fit(tmp_path, module, [ReadsLoss(), counter], max_steps=4, log_every=50)
    assert len([r for r in counter.reads if "__float__" in r]) == 2


def test_progress_bar_shows_host_values_only_and_logs_throughput(tmp_path: Path):
    """Every progress-bar value is read each step by Lightning, so the step logs none from the
    device; the bar's loss and tokens/s come from the logging steps."""
    bar_keys: set[str] = set()

    class BarKeys(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            bar_keys.update(m.meta.name for m in trainer._results.values() if m.meta.prog_bar)

    trainer = _fit(tmp_path, _module(True, 6), [BarKeys()], max_steps=6, log_every=2)
    assert bar_keys == {"loss", "train/tokens_per_s"}
    assert trainer.progress_bar_metrics["train/tokens_per_s"] > 0
    assert trainer.progress_bar_metrics["loss"] == pytest.approx(float(trainer.logged_metrics["train/loss"]))


def test_cross_mesh_gradient_norm_builds_no_tensor_from_host_data(monkeypatch):
    """``torch.tensor(list, device=cuda)`` is a copy from pageable host memory, which makes the host
    wait for the GPU: the strategy's clipping runs every step, so it must not build one."""
    from biomoe.parallel.grad_clip import clip_grad_norm_, global_grad_norm

    params = [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(4, dtype=torch.bfloat16))]
    for p in params:
        p.grad = torch.randn_like(p)
    expected = torch.linalg.vector_norm(torch.stack([p.grad.float().norm() for p in params]))

    def no_host_tensors(*args, **kwargs):
        raise AssertionError("torch.tensor called in the clipping path")

    monkeypatch.setattr(torch, "tensor", no_host_tensors)
    norm = global_grad_norm(params)
    clip_grad_norm_(params, 0.5)
    monkeypatch.undo()
    torch.testing.assert_close(norm, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(global_grad_norm(params), torch.tensor(0.5), rtol=1e-3, atol=1e-5)
