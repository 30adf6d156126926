"""An exponential moving average of the weights that lives on the trainer's device.

Lightning's ``EMAWeightAveraging`` builds its average in ``setup``, before the strategy moves the
module to its device, so without an explicit ``device`` the average stays on the CPU and a GPU run
copies every weight to the host after each step. A config that named ``device: cuda`` instead could
not run on a machine without CUDA. This subclass places the average on the trainer's root device
(the GPU of a GPU run, the CPU of a CPU run) when no ``device`` is given; an explicit one still wins.
Checkpoints are the same as Lightning's (same class name, same state).
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.callbacks import EMAWeightAveraging as _LightningEMA

from biomoe.compat import lightning as lightning_compat

__all__ = ["EMAWeightAveraging"]


class EMAWeightAveraging(_LightningEMA):
    """Lightning's ``EMAWeightAveraging`` (same arguments), on the trainer's device by default."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit" and lightning_compat.weight_averaging_device(self) is None:
            lightning_compat.set_weight_averaging_device(self, trainer.strategy.root_device)
        super().setup(trainer, pl_module, stage)
