"""Training state that Lightning's checkpoints leave out, so a resumed run continues bit-exactly.

Lightning saves weights, buffers, optimizer, schedulers, loop progress and stateful dataloaders,
but not (a) the routers' running load counts, which are non-persistent buffers (they are
window statistics, not model state, and must not end up in exported weights) yet are logged at the
next logging step and, for the current optimizer step, drive the expert-bias update, and (b) the
global random number generators. Without them a run resumed at step N logs other loads — and draws
different random numbers — than the run that was never interrupted.
:class:`~biomoe.training.step.lightning_module.BioMoEModule` stores both under one checkpoint key.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["CHECKPOINT_KEY", "collect_resume_state", "restore_resume_state"]

CHECKPOINT_KEY = "biomoe_resume_state"

_ROUTER_STATS = ("load_counts", "step_counts")
"""Saved router buffers. Checkpoints of earlier versions also hold ``prob_sums`` and
``routed_tokens`` (statistics nothing read) and no ``step_counts``: what is missing is left as it
is, what is no longer kept is ignored."""


def _routers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Modules that keep router load statistics, by name (stable across save and load)."""
    return [(name, m) for name, m in model.named_modules() if all(hasattr(m, s) for s in _ROUTER_STATS)]


def collect_resume_state(model: nn.Module | None) -> dict[str, Any]:
    """Router statistics (copied to CPU) and the torch / numpy / python RNG states of this rank."""
    routers = {}
    if model is not None:
        for name, router in _routers(model):
            routers[name] = {s: getattr(router, s).detach().to("cpu", copy=True) for s in _ROUTER_STATS}
    # Plain lists/ints/tensors only: checkpoints must load with ``torch.load(weights_only=True)``.
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, py_state, py_gauss = random.getstate()
    rng: dict[str, Any] = {"torch": torch.get_rng_state(),
                           "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos),
                                     int(has_gauss), float(gauss)],
                           "python": [version, list(py_state), py_gauss]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return {"routers": routers, "rng": rng}


def restore_resume_state(model: nn.Module | None, state: dict[str, Any] | None) -> None:
    """Inverse of :func:`collect_resume_state`; missing parts (older checkpoints) are left as they are."""
    if not state:
        return
    saved = state.get("routers", {})
    if model is not None:
        for name, router in _routers(model):
            for s in _ROUTER_STATS:
                if s in saved.get(name, {}):
                    buf = getattr(router, s)
                    buf.copy_(saved[name][s].to(device=buf.device, dtype=buf.dtype))
    rng = state.get("rng", {})
    if "torch" in rng:
        torch.set_rng_state(rng["torch"])
    if "numpy" in rng:
        kind, keys, pos, has_gauss, gauss = rng["numpy"]
        np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    if "python" in rng:
        version, py_state, py_gauss = rng["python"]
        random.setstate((version, tuple(py_state), py_gauss))
    if "cuda" in rng and torch.cuda.is_available() and len(rng["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(rng["cuda"])
