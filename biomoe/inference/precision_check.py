"""``--precision`` of an inference command, checked against the device before the model is built.

Training checks ``model.runtime.precision`` at build time and lists the training precisions that
run (:mod:`biomoe.backends.te.precision`). An inference command also runs in ``fp32`` (the default
on a CPU), so its one line names ``--precision`` and lists ``fp32`` among what works here: on a CPU
that is fp32 and bf16, never only bf16.
"""

from __future__ import annotations

import torch

from biomoe.errors import ConfigError
from biomoe.precisions import PRECISIONS

__all__ = ["check_inference_precision", "inference_precisions_here"]

_EVERYWHERE = ("fp32", "bf16")
"""Torch runs these on every device (bf16 on a CPU is slow but exact to its format)."""


def inference_precisions_here(device: torch.device | str) -> list[str]:
    """The ``--precision`` values that run on ``device``: fp32, bf16 and the TE recipes its GPU has."""
    from biomoe.backends.te.availability import device_info, te_usable
    from biomoe.backends.te.precision import supported_precisions, te_support_checker

    device = torch.device(device)
    if device.type != "cuda":
        return list(_EVERYWHERE)
    te_ok = te_usable(device)
    recipes = supported_precisions(device_info(device), te_ok, te_support_checker if te_ok else None)
    return list(dict.fromkeys([*_EVERYWHERE, *recipes]))


def check_inference_precision(precision: str | None, device: torch.device | str) -> None:
    """One line naming ``--precision`` when that precision cannot run on ``device``."""
    if precision is None:
        return
    from biomoe.inference.load import parse_inference_precision

    name = parse_inference_precision(precision)
    if name in _EVERYWHERE:
        return
    works = inference_precisions_here(device)
    if name in works:
        return
    device = torch.device(device)
    if device.type != "cuda":
        where = "this command runs on the CPU" if torch.cuda.is_available() else "this machine has no CUDA GPU"
    else:
        name_of = torch.cuda.get_device_name(device)
        major, minor = torch.cuda.get_device_capability(device)
        where = f"this GPU is {name_of} (compute capability {major}.{minor})"
        from biomoe.backends.te.availability import te_usable

        if not te_usable(device):
            where += " and Transformer Engine is not usable here (pip install biomoe[te])"
    raise ConfigError(f"--precision {name} needs {PRECISIONS[name].needs}, but {where}; precisions that work "
                      f"here: {', '.join(works)}")
