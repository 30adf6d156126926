"""biomoe's EMA of the weights: built on the trainer's device unless told otherwise."""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.demos.boring_classes import BoringModel

from biomoe.compat import lightning as lightning_compat
from biomoe.training.optimization.ema import EMAWeightAveraging


def test_weight_averaging_device_is_read_and_set_where_lightning_keeps_it():
    callback = EMAWeightAveraging(decay=0.9)
    assert lightning_compat.weight_averaging_device(callback) is None  # Lightning's default
    assert lightning_compat.weight_averaging_device(EMAWeightAveraging(device="cpu")) == torch.device("cpu")
    lightning_compat.set_weight_averaging_device(callback, torch.device("meta"))
    assert lightning_compat.weight_averaging_device(callback) == torch.device("meta")


def test_average_is_built_on_the_trainers_device_and_an_explicit_device_wins(tmp_path):
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    default, explicit = EMAWeightAveraging(decay=0.9), EMAWeightAveraging(decay=0.9, device="meta")
    module = BoringModel()
    default.setup(trainer, module, "fit")
    assert lightning_compat.weight_averaging_device(default) == trainer.strategy.root_device
    explicit.setup(trainer, module, "fit")
    assert lightning_compat.weight_averaging_device(explicit) == torch.device("meta")
    assert type(default).__name__ == "EMAWeightAveraging"  # checkpoint state keys match Lightning's callback


class Bf16Boring(BoringModel):
    """BoringModel with bf16 weights, as ``trainer.precision: bf16-true`` leaves them."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = self.layer.to(torch.bfloat16)

    def forward(self, x):
        return self.layer(x.to(torch.bfloat16)).float()


class Record(L.Callback):
    """Weights after every optimizer step (fp64, for a reference average) and around validation."""

    def __init__(self) -> None:
        self.after_step: list[dict[str, torch.Tensor]] = []
        self.validated: list[dict[str, torch.Tensor]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.after_step.append({k: v.detach().double().clone() for k, v in pl_module.named_parameters()})

    def on_validation_epoch_start(self, trainer, pl_module):
        self.validated.append({k: v.detach().clone() for k, v in pl_module.named_parameters()})


def test_bf16_weights_are_averaged_in_fp32_and_validation_leaves_the_average_unrounded(tmp_path):
    torch.manual_seed(0)
    decay = 0.997  # a step of 0.3 %: below bf16's resolution, so a bf16 average would not move
    ema, record = EMAWeightAveraging(decay=decay, use_buffers=False), Record()
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=40, limit_train_batches=40, limit_val_batches=1,
                        val_check_interval=20, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=tmp_path,
                        callbacks=[record, ema])  # record first: it sees the weights before the EMA updates
    module = Bf16Boring()
    trainer.fit(module)
    average = dict(lightning_compat.weight_averaging_model(ema).module.named_parameters())
    assert all(v.dtype == torch.float32 for v in average.values())
    reference = {k: v.clone() for k, v in record.after_step[0].items()}
    for weights in record.after_step[1:]:
        for k in reference:
            reference[k] = decay * reference[k] + (1 - decay) * weights[k]
    for k, ref in reference.items():
        torch.testing.assert_close(average[k].double(), ref, rtol=0, atol=1e-6)
        # a bf16 average could not have moved this far from the first weights in 0.3 % steps
        moved = (ref - record.after_step[0][k]).abs().max()
        assert moved > 0
    # validation saw the average (rounded to bf16), then training resumed on its own weights
    assert len(record.validated) == 2


def test_validation_restores_the_training_weights_exactly(tmp_path):
    torch.manual_seed(0)
    ema = EMAWeightAveraging(decay=0.9, use_buffers=False)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=5, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    module = Bf16Boring()
    ema.setup(trainer, module, "fit")
    for _ in range(3):
        with torch.no_grad():
            for p in module.parameters():
                p.add_(torch.randn_like(p))
        lightning_compat.weight_averaging_model(ema).update_parameters(module)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    average = {k: v.clone() for k, v in lightning_compat.weight_averaging_model(ema).module.state_dict().items()}
    ema.on_validation_epoch_start(trainer, module)
    for k, v in module.state_dict().items():
        assert torch.equal(v, average[k].to(v.dtype))  # validation runs on the average
    ema.on_validation_epoch_end(trainer, module)
    assert all(torch.equal(v, before[k]) for k, v in module.state_dict().items())
    after = lightning_compat.weight_averaging_model(ema).module.state_dict()
    assert all(torch.equal(v, average[k]) for k, v in after.items())  # the fp32 average is not rounded
