"""Transformer Engine's ``FusedAdam`` as the master-weight AdamW on a CUDA device.

``biomoe.training.optimization.master_adamw.AdamWWithMasterWeights`` (the CPU reference) casts each bf16 gradient to
fp32, runs torch's fused AdamW on the fp32 masters and copies them back: about 40 bytes of memory
traffic per parameter per step. TE's multi-tensor kernel reads the bf16 gradient and writes the fp32
master, both moments and the bf16 weight in one pass (28 bytes; 20 with bf16 moments), which is what
lets fp32 master weights cost little against updating bf16 weights in place. With
``master_storage="remainder"`` it keeps only the 16 bits of each master that the bf16 weight lacks
(``store_param_remainders``: the master is then rebuilt exactly in registers; 2 bytes of state per
parameter instead of 4, and 24 bytes of traffic, 16 with bf16 moments).

Checkpoints are written in the reference optimizer's layout
(:mod:`biomoe.checkpoint.optimizer_state`), so a run saved here resumes on the CPU path and back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from transformer_engine.pytorch.optimizers import FusedAdam

from biomoe.checkpoint.optimizer_state import (MASTER_STORAGES, MOMENT_DTYPES, TE_MASTER, join_master, local_shard,
                                               portable_to_te, split_master, te_to_portable)


def keeps_remainder(optimizer: FusedAdam, param: torch.Tensor) -> bool:
    """Whether TE keeps only the remainder of ``param``'s master (bf16 parameters, when asked)."""
    return optimizer.store_param_remainders and param.dtype == torch.bfloat16


def indexed_params(optimizer: torch.optim.Optimizer, state_dict: dict[str, Any]) -> list[tuple[int, torch.Tensor]]:
    """(index in ``state_dict``, parameter) pairs, in torch's order of groups and parameters."""
    saved_ids = [i for group in state_dict["param_groups"] for i in group["params"]]
    return list(zip(saved_ids, [p for group in optimizer.param_groups for p in group["params"]]))


class TEAdamWWithMasterWeights(FusedAdam):
    """Decoupled-weight-decay Adam with fp32 masters kept by TE, checkpointed portably."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, *, moment_dtype: str = "fp32",
                 master_storage: str = "fp32") -> None:
        if master_storage not in MASTER_STORAGES:
            raise ValueError(f"master_storage: {master_storage!r} is not one of {', '.join(MASTER_STORAGES)}")
        first, second = MOMENT_DTYPES[moment_dtype]
        super().__init__(params, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                         adam_w_mode=True, master_weights=True, master_weight_dtype=torch.float32,
                         exp_avg_dtype=first, exp_avg_sq_dtype=second,
                         store_param_remainders=master_storage == "remainder")

    def state_dict(self) -> dict[str, Any]:
        """The portable layout: every master a full fp32 tensor (remainders joined with the weights)."""
        state_dict = super().state_dict()
        for index, param in indexed_params(self, state_dict):
            entry = state_dict["state"].get(index)
            if entry is not None and keeps_remainder(self, param) and TE_MASTER in entry:
                entry[TE_MASTER] = join_master(param.detach(), entry[TE_MASTER])
        return te_to_portable(state_dict)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Accepts the portable layout (and TE's own). Where only remainders are kept, each saved
        master is split again and the bf16 weight set from it, so weight and remainder agree."""
        converted = portable_to_te(state_dict, self.param_groups)
        for index, param in indexed_params(self, converted):
            entry = converted["state"].get(index)
            if entry is None or not keeps_remainder(self, param) or TE_MASTER not in entry:
                continue
            master = entry[TE_MASTER]
            if master.dtype == torch.int16:  # TE's own layout: already a remainder
                continue
            weight, remainder = split_master(master.to(device=param.device, dtype=torch.float32))
            with torch.no_grad():
                local_shard(param.data).copy_(local_shard(weight))
            entry[TE_MASTER] = remainder
        super().load_state_dict(converted)
