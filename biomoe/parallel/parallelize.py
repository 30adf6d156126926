"""Apply expert parallelism, load balancing and FSDP2 to a plain ``MoETransformer``.

The one entry point the strategy (or a plain torch script) calls; the model code never changes.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy

from biomoe.parallel.expert_parallel import apply_expert_parallel
from biomoe.parallel.fsdp import apply_fsdp
from biomoe.parallel.load_balance import MODES, install_load_balancing
from biomoe.parallel.mesh import ParallelMeshes

_MARK = "_biomoe_parallelized"


def parallelize(model: nn.Module, meshes: ParallelMeshes, load_balancing: str = "global",
                device: torch.device | None = None, mp_policy: MixedPrecisionPolicy | None = None,
                reshard_after_forward: bool = True) -> nn.Module:
    """Shard ``model`` in place and return it. Calling it again on the same model is a no-op.

    ``device``: if the model was built on the meta device, it is materialised there afterwards
    and initialised with the model's own ``reset_parameters`` (Lightning's generic
    materialisation would call ``nn.Linear.reset_parameters`` and lose the model's init).
    """
    if getattr(model, _MARK, False):
        return model
    if load_balancing not in MODES:
        raise ValueError(f"load_balancing={load_balancing!r}; choose one of {', '.join(MODES)}")
    dims = meshes.dims
    if dims.ep > 1:
        apply_expert_parallel(model, meshes.ep)
    group = {"global": meshes.dp, "ep": meshes.ep, "local": None}[load_balancing]
    install_load_balancing(model, None if group is None else group.get_group())
    apply_fsdp(model, meshes.dense, meshes.experts if dims.ep > 1 else None, dims.dp,
               mp_policy=mp_policy, reshard_after_forward=reshard_after_forward)
    if device is not None and any(p.is_meta for p in model.parameters()):
        materialize(model, device)
    setattr(model, _MARK, True)
    return model


@torch.no_grad()
def materialize(model: nn.Module, device: torch.device) -> None:
    """Allocate meta parameters/buffers on ``device`` and run the model's initialisation.

    Random init of DTensor shards goes through DTensor's RNG tracker, so shards differ where they
    should and agree where replicated.
    """
    model.to_empty(device=device)
    model.reset_parameters()  # type: ignore[operator]
    for layer in model.moe_layers():  # type: ignore[operator]
        layer.router.expert_bias.zero_()
        layer.router.reset_stats()
