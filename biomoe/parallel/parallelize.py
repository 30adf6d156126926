"""The parallel layout of one run, and the two steps that apply it to a plain ``MoETransformer``.

:func:`biomoe.build.build_model` calls :func:`apply_expert_parallelism` before activation
checkpointing and compile, and :func:`apply_data_parallelism` after them (torchtitan's order);
the model code never changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy

from biomoe.parallel.expert_parallel import apply_expert_parallel
from biomoe.parallel.fsdp import apply_fsdp
from biomoe.parallel.load_balance import MODES, install_load_balancing
from biomoe.parallel.mesh import ParallelMeshes


@dataclass
class ParallelPlan:
    """Meshes and options from :class:`~biomoe.parallel.strategy.ExpertParallelStrategy`."""

    meshes: ParallelMeshes
    load_balancing: str = "global"
    reshard_after_forward: bool = True
    mp_policy: MixedPrecisionPolicy | None = None
    shard_single_device: bool = False
    """FSDP2 also at world size 1: the parameters are DTensors as on many GPUs, which lets one GPU
    check what only sharded runs exercise (the optimizer on DTensors, their checkpoints)."""

    def __post_init__(self) -> None:
        if self.load_balancing not in MODES:
            raise ValueError(f"load_balancing={self.load_balancing!r}; choose one of {', '.join(MODES)}")

    @property
    def shards(self) -> bool:
        """FSDP2 only where there is something to shard: at world size 1 it would only add a copy
        and cast of every parameter per step."""
        return self.meshes.dims.world_size > 1 or self.shard_single_device


def apply_expert_parallelism(model: nn.Module, plan: ParallelPlan) -> None:
    """Split the experts over ``ep`` (all-to-all dispatch) and reduce router statistics over the
    group ``load_balancing`` names."""
    meshes = plan.meshes
    if meshes.dims.ep > 1:
        apply_expert_parallel(model, meshes.ep)
    if meshes.dims.world_size > 1:
        group = {"global": meshes.dp, "ep": meshes.ep, "local": None}[plan.load_balancing]
        install_load_balancing(model, None if group is None else group.get_group())


def apply_data_parallelism(model: nn.Module, plan: ParallelPlan) -> None:
    """FSDP2 over the data ranks (experts over the ranks that hold the same experts)."""
    if not plan.shards:
        return
    dims = plan.meshes.dims
    apply_fsdp(model, plan.meshes.dense, plan.meshes.experts if dims.ep > 1 else None, dims.dp,
               mp_policy=plan.mp_policy, reshard_after_forward=plan.reshard_after_forward)


@torch.no_grad()
def materialize(model: nn.Module, device: torch.device) -> None:
    """Allocate meta parameters/buffers on ``device`` and run the model's initialisation.

    Random init of DTensor shards goes through DTensor's RNG tracker, so shards differ where they
    should and agree where replicated. (Lightning's generic materialisation would call
    ``nn.Linear.reset_parameters`` and lose the model's own init.)
    """
    model.to_empty(device=device)
    model.reset_parameters()  # type: ignore[operator]
    for layer in model.moe_layers():  # type: ignore[operator]
        layer.router.expert_bias.zero_()
        layer.router.reset_stats()
