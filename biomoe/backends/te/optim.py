"""Transformer Engine's ``FusedAdam`` as the master-weight AdamW on a CUDA device.

``biomoe.training.optim.AdamWWithMasterWeights`` (the CPU reference) casts each bf16 gradient to
fp32, runs torch's fused AdamW on the fp32 masters and copies them back: about 40 bytes of memory
traffic per parameter per step. TE's multi-tensor kernel reads the bf16 gradient and writes the fp32
master, both moments and the bf16 weight in one pass (28 bytes; 20 with bf16 moments), which is what
lets fp32 master weights cost little against updating bf16 weights in place.

Checkpoints are written in the reference optimizer's layout (per parameter ``master``,
``exp_avg``, ``exp_avg_sq``, ``step``), so a run saved here resumes on the CPU path and back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from transformer_engine.pytorch.optimizers import FusedAdam

_TE_MASTER = "master_param"
_MASTER = "master"
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
        state_dict = super().state_dict()
        steps = {index: group.get("step", 0) for group in state_dict["param_groups"] for index in group["params"]}
        for group in state_dict["param_groups"]:
            group.pop("step", None)
        for index, entry in state_dict["state"].items():
            if _TE_MASTER in entry:
                entry[_MASTER] = entry.pop(_TE_MASTER)
            step = steps.get(index, 0)
            entry["step"] = torch.tensor(float(step))
        return state_dict

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Accepts the portable layout (and TE's own); TE counts steps per group, not per parameter."""
        # torch's loader replaces each group with the saved one: keep TE's own group settings
        # (bias_correction, ...) that a checkpoint of the reference optimizer does not hold.
        converted = {"param_groups": [{**{k: v for k, v in own.items() if k != "params"}, **saved}
                                      for own, saved in zip(self.param_groups, state_dict["param_groups"])],
                     "state": {}}
        group_of = {index: group for group in converted["param_groups"] for index in group["params"]}
        for index, entry in state_dict["state"].items():
            entry = dict(entry)
            if _MASTER in entry:
                entry[_TE_MASTER] = entry.pop(_MASTER)
            step = entry.pop("step", None)
            converted["state"][index] = entry
            if step is not None and index in group_of:
                group = group_of[index]
                group["step"] = max(int(step), int(group.get("step", 0)))
        super().load_state_dict(converted)
