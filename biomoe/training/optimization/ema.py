"""An exponential moving average of the weights, on the trainer's device and in fp32.

Lightning's ``EMAWeightAveraging`` is kept (same class name, arguments and checkpoint layout) with
three changes that matter on a GPU and with bf16 weights:

* **Device.** Lightning builds the average in ``setup``, before the strategy moves the module, so
  without an explicit ``device`` it stays on the CPU and a GPU run copies every weight to the host
  after each step; a config naming ``device: cuda`` could not run without CUDA. The average is
  placed on the trainer's root device when no ``device`` is given; an explicit one still wins.
* **Precision.** With ``trainer.precision: bf16-true`` the weights are bf16, and an average kept in
  bf16 cannot move: a step of ``(1 - decay) = 0.3 %`` of the difference is below bf16's resolution
  (8 significant bits), so the average would freeze at the first weights. Low-precision floating
  weights are therefore averaged into fp32 copies. Validation runs on the average rounded to the
  weights' dtype while the training weights wait aside, and the fp32 average is never rounded by
  that round trip (Lightning swaps the two, which would round it at every validation).
* **Kernels.** The update is one multi-tensor lerp per device and dtype instead of three kernels
  per parameter each step, which a host-bound step would feel.
"""

from __future__ import annotations

import itertools
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import EMAWeightAveraging as _LightningEMA
from torch import Tensor

from biomoe.compat import lightning as lightning_compat
from biomoe.compat.torch import foreach_copy_, foreach_ema_

__all__ = ["EMAWeightAveraging", "ema_update"]

LOW_PRECISION = (torch.bfloat16, torch.float16)


def ema_update(decay: float):
    """``AveragedModel``'s ``multi_avg_fn``: ``average = decay * average + (1 - decay) * weight``."""

    def update(averages: list[Tensor], weights: list[Tensor], n_averaged: Tensor) -> None:
        foreach_ema_(averages, weights, 1.0 - decay)

    return update


def _mixed_precision_update(average: Any, decay: float):
    """``AveragedModel.update_parameters`` for fp32 averages of low-precision weights: the first
    call copies, later ones move the average by ``1 - decay``; buffers follow the model unless
    averaged (as torch's)."""

    started = [False]  # read from the device once (a resumed average has n_averaged > 0), then kept

    @torch.no_grad()
    def update(model: torch.nn.Module) -> None:
        if average.use_buffers:
            averages = list(itertools.chain(average.module.parameters(), average.module.buffers()))
            values = list(itertools.chain(model.parameters(), model.buffers()))
        else:
            averages, values = list(average.parameters()), list(model.parameters())
            for mine, theirs in zip(average.module.buffers(), model.buffers()):
                mine.detach().copy_(theirs.detach().to(mine.device))
        averages = [a.detach() for a in averages]
        values = [v.detach().to(a.device) for a, v in zip(averages, values)]
        started[0] = started[0] or int(average.n_averaged) > 0
        if not started[0]:
            foreach_copy_(averages, values)
            started[0] = True
        else:
            foreach_ema_(averages, values, 1.0 - decay)
        average.n_averaged += 1

    return update


class EMAWeightAveraging(_LightningEMA):
    """Lightning's ``EMAWeightAveraging`` (same arguments), on the trainer's device, in fp32."""

    def __init__(self, device: Any = None, use_buffers: bool = True, decay: float = 0.999,
                 update_every_n_steps: int = 1, update_starting_at_step: int | None = None,
                 update_starting_at_epoch: int | None = None, **kwargs: Any) -> None:
        super().__init__(device=device, use_buffers=use_buffers, decay=decay,
                         update_every_n_steps=update_every_n_steps, update_starting_at_step=update_starting_at_step,
                         update_starting_at_epoch=update_starting_at_epoch, **kwargs)
        lightning_compat.set_weight_averaging_update(self, ema_update(decay))
        self._decay_value = decay
        self._training_weights: list[Tensor] | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit" and lightning_compat.weight_averaging_device(self) is None:
            lightning_compat.set_weight_averaging_device(self, trainer.strategy.root_device)
        super().setup(trainer, pl_module, stage)
        average = lightning_compat.weight_averaging_model(self)
        if stage == "fit" and average is not None:
            for tensor in itertools.chain(average.module.parameters(), average.module.buffers()):
                if tensor.dtype in LOW_PRECISION:
                    tensor.data = tensor.data.float()
            # Always biomoe's update: the precision plugin may cast the module to bf16 only after this
            # hook, and torch's update refuses an fp32 average of bf16 weights on CUDA.
            average.update_parameters = _mixed_precision_update(average, self._decay_value)

    def _pairs(self, pl_module: L.LightningModule) -> tuple[list[Tensor], list[Tensor]]:
        average = lightning_compat.weight_averaging_model(self)
        averaged = [t.data for t in itertools.chain(average.module.parameters(), average.module.buffers())]
        current = [t.data for t in itertools.chain(pl_module.parameters(), pl_module.buffers())]
        return averaged, current

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Validate the average: the training weights are kept aside, the average is not touched."""
        if lightning_compat.weight_averaging_model(self) is None:
            return
        averaged, current = self._pairs(pl_module)
        self._training_weights = [t.clone() for t in current]
        foreach_copy_(current, averaged)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.restore_training_weights(pl_module)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        """A run stopped inside a validation (Ctrl-C) holds the average in the module: put the
        training weights back, so that a checkpoint written now resumes from them."""
        self.restore_training_weights(pl_module)

    def restore_training_weights(self, pl_module: L.LightningModule) -> None:
        """The training weights back into the module after a validation of the average (once;
        nothing to do outside one)."""
        if self._training_weights is None:
            return
        _, current = self._pairs(pl_module)
        foreach_copy_(current, self._training_weights)
        self._training_weights = None
