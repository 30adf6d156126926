"""A model's structure without its values: built on the meta device, its initialisers skipped.

Two readers of a checkpoint need the model's shape before any weight: the verifier (which
tensors, of which shapes, a config gives) and the inference loader (tensors allocated, then
filled from the file). Neither needs an initial value. On the meta device ``normal_`` runs
torch's Python reference, which imports ``torch._dynamo`` (seconds in a command that never
compiles); skipping the ``torch.nn.init`` calls, as Lightning's empty-init context does, costs
nothing and changes nothing: a meta tensor has no values to initialise.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from biomoe.model.backends import TORCH_BACKENDS, LayerBackends
from biomoe.model.config import ModelConfig
from biomoe.model.transformer import MoETransformer

__all__ = ["empty_on", "meta_model"]


class _SkipInitialisers(TorchFunctionMode):
    """``torch.nn.init`` functions return their tensor untouched; every other call runs."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch.nn.init":
            return args[0] if args else kwargs.get("tensor")
        return func(*args, **kwargs)


def meta_model(config: ModelConfig, backends: LayerBackends = TORCH_BACKENDS) -> MoETransformer:
    """``MoETransformer(config, backends)`` on the meta device, no initialiser run: its tensors have
    shapes and dtypes only (``to_empty`` gives them memory)."""
    with torch.device("meta"), _SkipInitialisers():
        return MoETransformer(config, backends)


def empty_on(model: nn.Module, device: torch.device | str) -> nn.Module:
    """``model.to_empty(device=device)`` for a meta-device model, tied tensors kept tied.

    ``to_empty`` allocates each tensor with ``torch.empty_like`` of a meta tensor, whose Python
    reference imports torch's symbolic-shapes machinery (a third of a second); a plain
    ``torch.empty`` of the same shape and dtype allocates the same uninitialised memory. A tensor
    two modules share (tied embeddings) stays one tensor."""
    made: dict[int, torch.Tensor] = {}
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            if id(param) not in made:
                made[id(param)] = nn.Parameter(torch.empty(param.shape, dtype=param.dtype, device=device),
                                               requires_grad=param.requires_grad)
            setattr(module, name, made[id(param)])
        for name, buffer in list(module.named_buffers(recurse=False)):
            if id(buffer) not in made:
                made[id(buffer)] = torch.empty(buffer.shape, dtype=buffer.dtype, device=device)
            setattr(module, name, made[id(buffer)])  # an existing buffer keeps its persistence
    return model
