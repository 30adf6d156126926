"""Optimizer state between the portable master-weight layout and Transformer Engine's.

Checkpoints hold master-weight AdamW state in one portable layout, the one of the CPU reference
optimizer (``biomoe.training.optimization.master_adamw.AdamWWithMasterWeights``): per parameter ``master``,
``exp_avg``, ``exp_avg_sq`` and ``step``. TE's ``FusedAdam`` names the master ``master_param`` and
counts steps per parameter group. Converting on every save and load lets a run saved on a GPU with
TE resume on the CPU path and back. No optimizer is imported here.

A master may also be held as the 16 bits a bf16 weight lacks (``master_storage: remainder``): an
fp32 number is its bf16 upper half plus a 16-bit lower half, so the bf16 weight the model already
holds and an int16 remainder are the fp32 master exactly, at 2 bytes per parameter instead of 4.
The encoding is Transformer Engine's (``FusedAdam(store_param_remainders=True)``): the weight is
the upper half rounded up when the remainder, read as a signed int16, is negative (its top bit
set: at least half a bf16 step), so the weight is the master rounded to the nearest bf16 with ties
away from zero. :func:`join_master` and :func:`split_master` convert; checkpoints always hold the
joined fp32 master.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = ["MASTER_STORAGES", "MOMENT_DTYPES", "PORTABLE_MASTER", "TE_MASTER", "join_master", "split_master",
           "join_bits", "split_bits", "te_to_portable", "portable_to_te"]

PORTABLE_MASTER = "master"
TE_MASTER = "master_param"
MASTER_STORAGES = ("fp32", "remainder")
"""How a master-weight optimizer holds each fp32 master: whole, or as the remainder beside its bf16 weight."""
MOMENT_DTYPES = {"fp32": (torch.float32, torch.float32), "bf16": (torch.bfloat16, torch.bfloat16),
                 "bf16-first": (torch.bfloat16, torch.float32)}
"""The dtypes AdamW's first and second moments (``exp_avg``, ``exp_avg_sq``) may be stored in; the
update is computed in fp32 either way."""


_HALF = 1 << 16
_INT16_MIN = -(1 << 15)


def _wrap_int16(values: torch.Tensor) -> torch.Tensor:
    """int32 values wrapped into int16's range, as int16 arithmetic on the GPU wraps."""
    return torch.remainder(values - _INT16_MIN, _HALF) + _INT16_MIN


def local_shard(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard, a plain tensor as it is (the codec's bit work is elementwise)."""
    from torch.distributed.tensor import DTensor

    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def _sharded_like(local: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """``local`` as a DTensor sharded like ``reference`` when that is one."""
    from torch.distributed.tensor import DTensor

    if not isinstance(reference, DTensor):
        return local
    return DTensor.from_local(local, reference.device_mesh, reference.placements,
                              shape=reference.size(), stride=reference.stride())


def join_master(weight: torch.Tensor, remainder: torch.Tensor) -> torch.Tensor:
    """The fp32 master that a bf16 ``weight`` and its int16 ``remainder`` encode (bit-exact; a
    DTensor weight gives a DTensor master sharded like it)."""
    if weight.dtype != torch.bfloat16 or remainder.dtype != torch.int16:
        raise TypeError(f"join_master needs a bf16 weight and an int16 remainder, got {weight.dtype} "
                        f"and {remainder.dtype}")
    return _sharded_like(join_bits(local_shard(weight), local_shard(remainder)), weight)


def split_master(master: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(bf16 weight, int16 remainder)`` of an fp32 ``master``: the inverse of :func:`join_master`."""
    if master.dtype != torch.float32:
        raise TypeError(f"split_master needs an fp32 master, got {master.dtype}")
    weight, remainder = split_bits(local_shard(master))
    return _sharded_like(weight, master), _sharded_like(remainder, master)


def join_bits(weight: torch.Tensor, remainder: torch.Tensor) -> torch.Tensor:
    """:func:`join_master` on plain tensors, in elementwise integer ops only (no checks, no
    DTensor), so that ``torch.compile`` can fuse it into an optimizer's update."""
    low = remainder.to(torch.int32)
    upper = _wrap_int16(weight.view(torch.int16).to(torch.int32) - (low < 0).to(torch.int32))
    # upper * 2**16 + low's 16 bits: the fp32 bit pattern, without shifting a negative number.
    return (upper * _HALF + torch.remainder(low, _HALF)).view(torch.float32)


def split_bits(master: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`split_master` on a plain fp32 tensor, in elementwise integer ops only."""
    bits = master.contiguous().view(torch.int32)
    low = torch.remainder(bits, _HALF)  # 0 .. 2**16 - 1: the lower half's bit pattern
    remainder = _wrap_int16(low)
    upper = torch.div(bits - low, _HALF, rounding_mode="floor")  # the upper half, signed
    weight = _wrap_int16(upper + (remainder < 0).to(torch.int32))
    return weight.to(torch.int16).view(torch.bfloat16), remainder.to(torch.int16)


def te_to_portable(state_dict: dict[str, Any]) -> dict[str, Any]:
    """TE ``FusedAdam.state_dict()`` in the portable layout (changed in place and returned): the
    master under ``master``, the group's step count copied onto each of its parameters."""
    steps = {index: group.get("step", 0) for group in state_dict["param_groups"] for index in group["params"]}
    for group in state_dict["param_groups"]:
        group.pop("step", None)
    for index, entry in state_dict["state"].items():
        if TE_MASTER in entry:
            entry[PORTABLE_MASTER] = entry.pop(TE_MASTER)
        entry["step"] = torch.tensor(float(steps.get(index, 0)))
    return state_dict


def portable_to_te(state_dict: Mapping[str, Any], own_groups: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A portable (or TE's own) optimizer state for ``FusedAdam.load_state_dict``.

    torch's loader replaces each parameter group with the saved one, so TE's own group settings
    (``bias_correction``, ...) that a checkpoint of the reference optimizer does not hold are taken
    from ``own_groups``; a group's step count is the largest of its parameters'."""
    converted: dict[str, Any] = {
        "param_groups": [{**{k: v for k, v in own.items() if k != "params"}, **saved}
                         for own, saved in zip(own_groups, state_dict["param_groups"])],
        "state": {}}
    group_of = {index: group for group in converted["param_groups"] for index in group["params"]}
    for index, entry in state_dict["state"].items():
        entry = dict(entry)
        if PORTABLE_MASTER in entry:
            entry[TE_MASTER] = entry.pop(PORTABLE_MASTER)
        step = entry.pop("step", None)
        converted["state"][index] = entry
        if step is not None and index in group_of:
            group = group_of[index]
            group["step"] = max(int(step), int(group.get("step", 0)))
    return converted
