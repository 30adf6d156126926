"""Transformer Engine's ``FusedAdam`` as the master-weight AdamW on a CUDA device.

``biomoe.training.optim.AdamWWithMasterWeights`` (the CPU reference) casts each bf16 gradient to
fp32, runs torch's fused AdamW on the fp32 masters and copies them back: about 40 bytes of memory
traffic per parameter per step. TE's multi-tensor kernel reads the bf16 gradient and writes the fp32
master, both moments and the bf16 weight in one pass (28 bytes; 20 with bf16 moments), which is what
lets fp32 master weights cost little against updating bf16 weights in place.

Checkpoints are written in the reference optimizer's layout
(:mod:`biomoe.checkpoint.optimizer_state`), so a run saved here resumes on the CPU path and back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from transformer_engine.pytorch.optimizers import FusedAdam

from biomoe.checkpoint.optimizer_state import portable_to_te, te_to_portable

MOMENT_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class TEAdamWWithMasterWeights(FusedAdam):
    """Decoupled-weight-decay Adam with fp32 masters kept by TE, checkpointed portably."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, *, moment_dtype: str = "fp32") -> None:
        dtype = MOMENT_DTYPES[moment_dtype]
        super().__init__(params, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                         adam_w_mode=True, master_weights=True, master_weight_dtype=torch.float32,
                         exp_avg_dtype=dtype, exp_avg_sq_dtype=dtype)

    def state_dict(self) -> dict[str, Any]:
        return te_to_portable(super().state_dict())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Accepts the portable layout (and TE's own)."""
        super().load_state_dict(portable_to_te(state_dict, self.param_groups))
