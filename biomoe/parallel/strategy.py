"""``ExpertParallelStrategy``: Lightning's ModelParallelStrategy with an expert-parallel dimension.

What it changes relative to its parent (see docs: Lightning EP notes):

* one root DeviceMesh ``(dp_replicate, dp_shard_mod_ep, ep)`` instead of ``(data, tensor)``;
* the sampler splits data over *all* data ranks (EP ranks read different micro-batches);
* :meth:`parallel_plan` hands :func:`biomoe.build.build_model` the meshes and options (called from
  ``configure_model``); at world size 1 nothing is sharded, so one GPU runs at single-device speed;
* :meth:`clip_gradients_across_meshes` clips over dense and expert meshes together;
* checkpoints are always distributed (DCP) and swapped in atomically; experts are stored under
  global expert ids, so EP sizes can change between save and load.

YAML::

    trainer:
      strategy:
        class_path: biomoe.parallel.strategy.ExpertParallelStrategy
        init_args: {expert_parallel_size: 2}
"""

from __future__ import annotations

import shutil
from collections.abc import Generator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import torch
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.pytorch.strategies import ModelParallelStrategy
from lightning.pytorch.strategies.parallel import ParallelStrategy
from torch.optim import Optimizer

from biomoe.checkpoint.safe_types import allow_checkpoint_types, trusted
from biomoe.compat.lightning import set_device_mesh, setup_distributed
from biomoe.files import swap_in_directory
from biomoe.parallel.grad_clip import clip_grad_norm_, clip_grad_value_
from biomoe.parallel.mesh import ParallelDims, ParallelMeshes, build_meshes
from biomoe.parallel.parallelize import ParallelPlan


class ExpertParallelStrategy(ModelParallelStrategy):
    """FSDP2 data parallelism with expert parallelism carved out of the data-sharding ranks.

    Args:
        expert_parallel_size: ranks that split the experts (must divide ``num_experts`` and the
            data-parallel shard size). 1 = plain FSDP2.
        data_parallel_replicate_size: HSDP replicas (e.g. ``num_nodes`` to keep FSDP and EP
            traffic inside a node). 1 = fully sharded over the whole world.
        data_parallel_shard_size: ranks one replica is sharded over; ``"auto"`` = world / replicas.
        load_balancing: ``global`` | ``ep`` | ``local`` — the group router statistics (aux loss,
            load, bias update) are summed over (see README "Multi-GPU and multi-node").
        meta_init: build the model on the meta device and initialise it after sharding (needed
            for models that do not fit in one rank's memory). Otherwise it is built directly on
            this rank's GPU, then sharded.
        reshard_after_forward: FSDP2 frees gathered block weights after forward (less memory,
            one more all-gather in backward).
        shard_single_device: apply FSDP2 at world size 1 too (slower: with nothing to shard it
            only copies and casts every parameter each step). The parameters are then DTensors as
            on many GPUs, so one machine can check what sharded runs do with them.
    """

    def __init__(self, expert_parallel_size: int = 1, data_parallel_replicate_size: int = 1,
                 data_parallel_shard_size: int | Literal["auto"] = "auto",
                 load_balancing: Literal["global", "ep", "local"] = "global",
                 meta_init: bool = False, reshard_after_forward: bool = True,
                 shard_single_device: bool = False, save_distributed_checkpoint: bool = True,
                 process_group_backend: str | None = None,
                 timeout: timedelta | None = default_pg_timeout) -> None:
        if not save_distributed_checkpoint:
            raise ValueError("ExpertParallelStrategy always saves distributed checkpoints (the "
                             "single-file path re-keys optimizer state with FSDP1 APIs that break "
                             "with EP); export one file with `python -m biomoe.checkpoint.distributed`")
        super().__init__(data_parallel_size="auto", tensor_parallel_size=1,
                         save_distributed_checkpoint=True,
                         process_group_backend=process_group_backend, timeout=timeout)
        self.expert_parallel_size = expert_parallel_size
        self.data_parallel_replicate_size = data_parallel_replicate_size
        self.data_parallel_shard_size = data_parallel_shard_size
        self.load_balancing = load_balancing
        self.meta_init = meta_init
        self.reshard_after_forward = reshard_after_forward
        self.shard_single_device = shard_single_device
        self._meshes: ParallelMeshes | None = None

    # ------------------------------------------------------------------------------ set-up
    @property
    def meshes(self) -> ParallelMeshes:
        if self._meshes is None:
            raise RuntimeError("the device meshes exist only after the processes are initialised")
        return self._meshes

    def setup_environment(self) -> None:
        ParallelStrategy.setup_environment(self)
        setup_distributed(self)
        dims = ParallelDims.from_world(self.world_size, self.expert_parallel_size,
                                       self.data_parallel_replicate_size, self.data_parallel_shard_size)
        self._meshes = build_meshes(dims, self.root_device.type)
        assert self.lightning_module is not None
        set_device_mesh(self, self._meshes.root)

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        dp = self.meshes.dp
        return {"num_replicas": dp.size(), "rank": dp.get_local_rank()}

    @contextmanager
    def tensor_init_context(self, empty_init: bool | None = None) -> Generator[None, None, None]:
        # Weights are created where they will live: initialising billions of parameters on the
        # CPU and copying them over takes minutes; on the GPU it takes seconds.
        device = torch.device("meta") if (self.meta_init or empty_init) else self.root_device
        with device, self.precision_plugin.tensor_init_context():
            yield

    def parallel_plan(self) -> ParallelPlan:
        """This strategy's layout, for :func:`biomoe.build.build_model`."""
        return ParallelPlan(self.meshes, self.load_balancing, self.reshard_after_forward,
                            shard_single_device=self.shard_single_device)

    # ---------------------------------------------------------------------------- training
    def clip_gradients_across_meshes(self, optimizer: Optimizer, clip_val: float | None,
                                     algorithm: str | None = None) -> torch.Tensor | None:
        """Clip by global norm (default) or value over parameters on every mesh.

        Called from ``LightningModule.configure_gradient_clipping``; torch's ``clip_grad_norm_``
        (what Lightning's precision plugin uses) cannot mix DTensors of different meshes.
        """
        if not clip_val:
            return None
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if str(algorithm or "norm").lower().endswith("value"):
            clip_grad_value_(params, float(clip_val))
            return None
        return clip_grad_norm_(params, float(clip_val))

    # -------------------------------------------------------------------------- checkpoints
    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: str | Path,
                        storage_options: Any | None = None) -> None:
        """Write the distributed checkpoint next to ``filepath`` and swap it in when complete,
        so an interrupted save never destroys the previous checkpoint of that name."""
        final = Path(self.broadcast(filepath))
        tmp = final.with_name(f".{final.name}.tmp")
        if self.global_rank == 0 and tmp.exists():
            shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()
        self.barrier()
        super().save_checkpoint(checkpoint, tmp, storage_options)
        self.barrier()
        if self.global_rank == 0:
            swap_in_directory(tmp, final)
        self.barrier()

    def load_checkpoint(self, checkpoint_path: str | Path, weights_only: bool | None = None) -> dict[str, Any]:
        """As the parent, weights-only unless the user trusts checkpoints fully (``meta.pt``'s
        hyper-parameters are biomoe's allowlisted config dataclasses)."""
        allow_checkpoint_types()
        return super().load_checkpoint(checkpoint_path, weights_only=bool(weights_only) or not trusted())
