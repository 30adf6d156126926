"""Private PyTorch APIs biomoe relies on. Tested with torch 2.11 (CUDA 13.0) and 2.13 (CPU).

- ``torch._grouped_mm``: all experts in one grouped GEMM (no public grouped GEMM yet);
- ``torch._foreach_norm`` / ``_foreach_mul_`` / ``_foreach_copy_`` / ``_foreach_lerp_`` /
  ``_foreach_add_``: one fused kernel per device and dtype for gradient norms, clipping, copying
  master weights back and the weights' moving average, instead of one per parameter;
- ``checkpoint_wrapper``: torch's activation-checkpoint wrapper keeps state_dict keys unchanged
  (it lives under ``torch.distributed.algorithms._checkpoint``);
- ``DeviceMesh._flatten``: one process group over several mesh dimensions (as torchtitan does);
- ``_checkpoint_wrapped_module``: the block inside torch's checkpoint wrapper (compiled inside it);
- ``Optimizer._step_supports_amp_scaling``: the optimizer's step takes ``found_inf`` and skips a
  bad update on the device (torch's fused kernels; the contract ``GradScaler`` relies on);
- DCP's no-process-group loader with an empty planner: read chosen keys of a distributed
  checkpoint in one process without building a template state dict;
- ``torch._disable_dynamo``: ``torch.compiler.disable`` that imports ``torch._dynamo`` only when
  the function first runs, not when it is decorated (:func:`eager_when_compiled`);
- ``aten._scaled_dot_product_flash_attention``: the flash kernel's own causal flag aligns to the
  lower right when there are more keys than queries (:func:`flash_lower_right`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

TESTED_WITH = ("2.11", "2.13")

_F = TypeVar("_F", bound=Callable[..., Any])

__all__ = ["TESTED_WITH", "checkpoint_wrapper", "checkpoint_wrapped", "eager_when_compiled", "flatten_mesh",
           "flash_lower_right", "foreach_copy_", "foreach_ema_", "foreach_mul_", "foreach_norm", "grouped_mm",
           "has_grouped_mm", "load_checkpoint_keys", "step_supports_amp_scaling"]


def eager_when_compiled(fn: _F) -> _F:
    """``torch.compiler.disable`` for a function (or method) that dynamo cannot trace: inside a
    compiled region it runs eagerly and the graph is split around it.

    ``torch.compiler.disable`` imports ``torch._dynamo`` when it decorates (over a second on a
    CPU, more on a GPU machine), so every module using it made every command that imports it pay
    for the compiler. Here nothing of dynamo is imported until a compiled region calls ``fn``;
    outside one (``torch.compiler.is_compiling()`` is a flag read) ``fn`` is called directly."""
    disabled = torch._disable_dynamo(fn)  # torch's own lazy form of torch._dynamo.disable

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            return disabled(*args, **kwargs)
        return fn(*args, **kwargs)

    return call  # type: ignore[return-value]


def flash_lower_right(q: Tensor, k: Tensor, v: Tensor) -> Tensor | None:
    """Causal attention of ``s`` queries after ``L - s`` earlier keys ([b, heads, s, d] against
    [b, kv_heads, L, d]): query ``i`` sees keys ``0..L - s + i``, by the flash kernel with no mask in
    memory; None where that kernel cannot take these inputs (a CPU, fp32, a head size not a
    multiple of 8), for the caller's own path. ``kv_heads`` may divide ``heads`` (grouped-query
    attention): the kernel reads each key/value head for its group of query heads, so they are not
    repeated in memory first.

    SDPA's ``is_causal`` aligns to the upper left; the flash op's own flag, called directly, aligns
    to the lower right (the contract torch's ``causal_lower_right`` bias is built on). That bias is
    not used because its module imports ``torch._dynamo``: seconds of a use command's first batch."""
    if q.device.type != "cuda" or q.shape[-1] % 8:
        return None
    from torch.backends.cuda import can_use_flash_attention

    if not can_use_flash_attention(flash_capability_params(q, k, v)):
        return None
    return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, is_causal=True,
                                                              return_debug_mask=False)[0]


def flash_capability_params(q: Tensor, k: Tensor, v: Tensor) -> Any:
    """What :func:`flash_lower_right` asks ``can_use_flash_attention`` about: no mask and *no*
    causal flag, since that check refuses a causal flag with more keys than queries (SDPA's flag
    means upper-left, which the flash kernel does not do for them; its own flag is lower-right);
    grouped-query heads when the key/value heads are fewer than the query heads."""
    from torch.backends.cuda import SDPAParams

    return SDPAParams(q, k, v, None, 0.0, False, k.shape[1] != q.shape[1])


def has_grouped_mm() -> bool:
    return hasattr(torch, "_grouped_mm")


def grouped_mm(rows: Tensor, weights: Tensor, offsets: Tensor) -> Tensor:
    """``rows [M, K] @ weights[g] [K, N]`` for each group of rows ending at ``offsets[g]``."""
    return torch._grouped_mm(rows, weights, offs=offsets)


def foreach_norm(tensors: list[Tensor], ord: float = 2.0) -> list[Tensor]:
    """Per-tensor norms accumulated in fp32 (older torch without ``dtype``: in the stored dtype)."""
    try:
        return list(torch._foreach_norm(tensors, ord, dtype=torch.float32))
    except (TypeError, RuntimeError):
        return [v.float() for v in torch._foreach_norm(tensors, ord)]


def _shards(tensors: list[Tensor]) -> list[Tensor]:
    """Each DTensor's local shard (plain tensors as they are): the elementwise multi-tensor ops
    have no DTensor sharding rule on every torch, and elementwise work on matching shards is
    the same work. Only for elementwise ops: a norm of a shard is not the tensor's norm."""
    from torch.distributed.tensor import DTensor

    return [t.to_local() if isinstance(t, DTensor) else t for t in tensors]


def foreach_mul_(tensors: list[Tensor], factor: Tensor) -> None:
    with torch.no_grad():
        torch._foreach_mul_(_shards(tensors), factor)


def foreach_copy_(targets: list[Tensor], sources: list[Tensor]) -> None:
    """``targets[i].copy_(sources[i])`` (casting) as multi-tensor kernels, not one per tensor.
    DTensor pairs must share their placement (a master made from its parameter does)."""
    with torch.no_grad():  # DTensor.to_local is a view of the shard only without autograd
        torch._foreach_copy_(_shards(targets), _shards(sources))


def foreach_ema_(averages: list[Tensor], values: list[Tensor], weight: float) -> None:
    """``a += weight * (v - a)`` for every pair, as multi-tensor kernels; ``values`` may be of a
    lower precision than ``averages`` (bf16 weights, fp32 averages)."""
    with torch.no_grad():
        averages, values = _shards(averages), _shards(values)
        if all(a.dtype == v.dtype for a, v in zip(averages, values)):
            torch._foreach_lerp_(averages, values, weight)
        else:
            torch._foreach_mul_(averages, 1.0 - weight)
            torch._foreach_add_(averages, values, alpha=weight)


def checkpoint_wrapped(module: Any) -> Any:
    """The module inside :func:`checkpoint_wrapper` (``module`` itself when it is not wrapped)."""
    return getattr(module, "_checkpoint_wrapped_module", module)


def step_supports_amp_scaling(optimizer: Any) -> bool:
    """True when ``optimizer.step`` reads ``found_inf`` and skips its update on the device."""
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


def flatten_mesh(mesh: Any, name: str) -> Any:
    """A 1-D mesh (and process group) over all dimensions of the sub-mesh ``mesh``."""
    return mesh._flatten(name)


def load_checkpoint_keys(dcp_dir: str | os.PathLike[str], keys: set[str]) -> dict[str, Any]:
    """The top-level entries ``keys`` of a distributed checkpoint, loaded whole in this process."""
    # imported here: importing torch.distributed.checkpoint would slow every start-up (--help included)
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    state: dict[str, Any] = {}
    _load_state_dict(state, storage_reader=FileSystemReader(os.fspath(dcp_dir)),
                     planner=_EmptyStateDictLoadPlanner(keys=keys), no_dist=True)
    return state
