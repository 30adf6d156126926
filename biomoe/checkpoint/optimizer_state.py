"""Optimizer state between the portable master-weight layout and Transformer Engine's.

Checkpoints hold master-weight AdamW state in one portable layout, the one of the CPU reference
optimizer (``biomoe.training.optim.AdamWWithMasterWeights``): per parameter ``master``,
``exp_avg``, ``exp_avg_sq`` and ``step``. TE's ``FusedAdam`` names the master ``master_param`` and
counts steps per parameter group. Converting on every save and load lets a run saved on a GPU with
TE resume on the CPU path and back. Pure dictionary work: no optimizer is imported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = ["PORTABLE_MASTER", "TE_MASTER", "te_to_portable", "portable_to_te"]

PORTABLE_MASTER = "master"
TE_MASTER = "master_param"


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
