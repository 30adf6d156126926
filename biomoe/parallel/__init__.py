"""Expert parallelism beside FSDP2, applied to a plain :class:`~biomoe.model.transformer.MoETransformer`.

The pieces, each in its own module (torchtitan's ``parallelize_*`` layout):

* :mod:`~biomoe.parallel.mesh` — one DeviceMesh covering data-parallel replication, sharding and EP;
* :mod:`~biomoe.parallel.comm` — an autograd-aware all-to-all;
* :mod:`~biomoe.parallel.expert_parallel` — the all-to-all token dispatcher and expert sharding;
* :mod:`~biomoe.parallel.load_balance` — router statistics reduced over a process group;
* :mod:`~biomoe.parallel.fsdp` — ``fully_shard`` for dense blocks and for experts;
* :mod:`~biomoe.parallel.grad_clip` — gradient clipping over parameters living on several meshes;
* :mod:`~biomoe.parallel.parallelize` — the parallel plan and the steps that apply it
  (called by :func:`biomoe.build.build_model`, in torchtitan's order);
* :mod:`~biomoe.checkpoint.distributed` — consolidating a distributed checkpoint into one file;
* :mod:`~biomoe.parallel.strategy` — the Lightning strategy that drives it.
"""

from biomoe.parallel.mesh import ParallelDims, ParallelMeshes, build_meshes
from biomoe.parallel.parallelize import ParallelPlan

__all__ = ["ExpertParallelStrategy", "ParallelDims", "ParallelMeshes", "ParallelPlan", "build_meshes"]


def __getattr__(name: str):
    # The strategy imports Lightning; keep ``import biomoe.parallel`` light for plain-torch users.
    if name == "ExpertParallelStrategy":
        from biomoe.parallel.strategy import ExpertParallelStrategy

        return ExpertParallelStrategy
    raise AttributeError(name)
