"""FSDP2 for an expert-parallel model: experts over the ranks that hold the same experts, the rest
over every data-sharding rank.

Order matters (torchtitan's ``apply_fsdp``): experts are wrapped first so the block's wrapper
leaves their parameters alone, then each block, then the root (embedding, final norm, LM head).
"""

from __future__ import annotations

import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Shard

from biomoe.model.moe.layer import MoELayer


def set_gradient_divide_factor(module: nn.Module, factor: float, mesh: DeviceMesh) -> None:
    """Make FSDP divide this module's reduced gradients by ``factor``.

    The method was renamed across torch releases (``set_reduce_scatter_divide_factor`` before
    2.8). A custom factor makes FSDP use ``PREMUL_SUM``, which only NCCL implements; elsewhere
    (gloo in CI) it is told to reduce with SUM and divide locally, which is the same arithmetic.
    """
    setter = getattr(module, "set_gradient_divide_factor", None)
    if setter is None:
        setter = module.set_reduce_scatter_divide_factor  # type: ignore[attr-defined]
    setter(factor)
    # (A size-1 mesh skips communication and divides once by itself; forcing SUM there would
    # divide a second time.)
    if mesh.size() > 1 and dist.get_backend(mesh.get_group(0)) != "nccl":
        module.set_force_sum_reduction_for_comms(True)  # type: ignore[attr-defined]


def apply_fsdp(model: nn.Module, dense_mesh: DeviceMesh, expert_mesh: DeviceMesh | None,
               dp_size: int, mp_policy: MixedPrecisionPolicy | None = None,
               reshard_after_forward: bool = True) -> None:
    """Shard ``model`` in place.

    ``expert_mesh`` None means experts are not expert-parallel and are sharded with their block.
    Otherwise each rank's expert gradient is the sum over the micro-batches of its EP group, and
    the expert reduce-scatter runs over only ``dp_size / ep`` ranks; dividing by ``dp_size`` (not
    the group size) turns that into the mean over *all* data ranks, like the dense gradients.
    Experts are sharded on dim 1 (the feature dim): dim 0 is already split over EP, and sharding
    it again would need E/ep to be divisible by the FSDP degree and give strided shards.
    """
    kwargs = {"mp_policy": mp_policy} if mp_policy is not None else {}
    for block in model.blocks:  # type: ignore[attr-defined]
        if expert_mesh is not None and isinstance(block.mlp, MoELayer):
            fully_shard(block.mlp.experts, mesh=expert_mesh, reshard_after_forward=reshard_after_forward,
                        shard_placement_fn=lambda _param: Shard(1), **kwargs)
            set_gradient_divide_factor(block.mlp.experts, float(dp_size), expert_mesh)
        fully_shard(block, mesh=dense_mesh, reshard_after_forward=reshard_after_forward, **kwargs)
    # The root's parameters (embedding, norm, head) are used last in forward and first in
    # backward: keeping them unsharded after forward saves one all-gather.
    fully_shard(model, mesh=dense_mesh, reshard_after_forward=False, **kwargs)
