"""One DeviceMesh for data parallelism and expert parallelism.

FSDP2 only accepts expert DTensors (sharded over ``ep``) when the expert-sharding mesh and the EP
mesh have the same root mesh, so every process group comes from slicing a single root mesh with
dims ``(dp_replicate, dp_shard_mod_ep, ep)``. EP is carved out of the *inner* data-sharding ranks
(consecutive ranks, i.e. inside a node), as in torchtitan: every rank is still a data-parallel
rank with its own micro-batch; EP only changes where experts live.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from biomoe.compat.torch import flatten_mesh


@dataclass(frozen=True)
class ParallelDims:
    """Sizes of the parallel dimensions; ``dp_replicate · dp_shard`` is the world size."""

    dp_replicate: int
    dp_shard: int
    ep: int

    def __post_init__(self) -> None:
        for name in ("dp_replicate", "dp_shard", "ep"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.dp_shard % self.ep:
            raise ValueError(f"expert_parallel_size={self.ep} must divide the data-parallel shard "
                             f"size {self.dp_shard} (EP ranks are carved out of the sharding ranks)")

    @classmethod
    def from_world(cls, world_size: int, expert_parallel_size: int = 1,
                   dp_replicate: int = 1, dp_shard: int | str = "auto") -> ParallelDims:
        """Fill in ``dp_shard="auto"`` as ``world / dp_replicate`` and check the product."""
        if world_size % dp_replicate:
            raise ValueError(f"data_parallel_replicate_size={dp_replicate} does not divide the "
                             f"world size {world_size}")
        shard = world_size // dp_replicate if dp_shard == "auto" else int(dp_shard)
        if dp_replicate * shard != world_size:
            raise ValueError(f"data_parallel_replicate_size ({dp_replicate}) x "
                             f"data_parallel_shard_size ({shard}) must equal the world size "
                             f"({world_size})")
        return cls(dp_replicate, shard, expert_parallel_size)

    @property
    def world_size(self) -> int:
        return self.dp_replicate * self.dp_shard

    @property
    def dp(self) -> int:
        """All data-parallel ranks (each reads its own micro-batch)."""
        return self.world_size

    @property
    def dp_shard_mod_ep(self) -> int:
        """Ranks that hold the *same* experts inside one replica (experts are FSDP-sharded here)."""
        return self.dp_shard // self.ep


@dataclass
class ParallelMeshes:
    """The root mesh and the slices each parallelisation step needs."""

    dims: ParallelDims
    root: DeviceMesh
    dp: DeviceMesh  # every data rank: sampler, loss averaging, global router statistics
    dense: DeviceMesh  # fully_shard of dense params: 1-D shard mesh, or 2-D (replicate, shard) = HSDP
    experts: DeviceMesh  # fully_shard of experts: ranks holding the same experts
    ep: DeviceMesh  # all-to-all token exchange; experts are DTensors Shard(0) here


def build_meshes(dims: ParallelDims, device_type: str) -> ParallelMeshes:
    """Create the root mesh and flatten the slices (``DeviceMesh._flatten``, as torchtitan does)."""
    root = init_device_mesh(device_type, (dims.dp_replicate, dims.dp_shard_mod_ep, dims.ep),
                            mesh_dim_names=("dp_replicate", "dp_shard_mod_ep", "ep"))
    dp = flatten_mesh(root[("dp_replicate", "dp_shard_mod_ep", "ep")], "dp")
    shard = flatten_mesh(root[("dp_shard_mod_ep", "ep")], "dp_shard")
    if dims.dp_replicate > 1:
        dense = root[("dp_replicate", "dp_shard")]
        # HSDP for experts, except when one replica has a single copy of each expert: FSDP2
        # divides twice for a size-1 reduce-scatter with a custom divide factor, so shard the
        # experts over the replicas instead (same memory or less, same gradients).
        experts = (root["dp_replicate"] if dims.dp_shard_mod_ep == 1
                   else root[("dp_replicate", "dp_shard_mod_ep")])
    else:
        dense = shard
        experts = root["dp_shard_mod_ep"]
    return ParallelMeshes(dims, root, dp, dense, experts, root["ep"])
