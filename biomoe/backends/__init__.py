"""Kernels above the model: which library computes each layer, chosen once before it is built.

The model defines its seams (:mod:`biomoe.model.backends`, and the expert-backend registry
:data:`~biomoe.model.moe.experts.EXPERT_BACKENDS`) and never imports this package. Importing it
registers the expert backends it provides (quack-kernels' ``quack``, Transformer Engine's ``te``
and ``te_fused``; their modules import the kernel libraries only when a backend first computes),
so the build step, which imports :mod:`biomoe.backends.select`, always sees every backend biomoe
ships. Anywhere else, importing ``biomoe`` makes this package the registry's loader
(:meth:`~biomoe.model.moe.experts.ExpertBackendRegistry.add_loader`): it is imported the first time
backend names are listed or resolved, not when ``biomoe`` is (that would import torch).
"""

from __future__ import annotations

from biomoe.backends.quack import experts as _quack_experts  # noqa: F401  (registers quack)
from biomoe.backends.te import experts as _te_experts  # noqa: F401  (registers te, te_fused)
from biomoe.model.moe.experts import EXPERT_BACKENDS

__all__ = ["expert_backend_choices"]


def expert_backend_choices() -> list[str]:
    """Every value ``model.runtime.expert_backend`` accepts, biomoe's own backends registered."""
    return EXPERT_BACKENDS.choices()
