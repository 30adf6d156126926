"""The private dependency internals in biomoe.compat still exist in the installed versions.

A failure here means a dependency renamed something biomoe reaches into: update the one module
in ``biomoe/compat`` (and its ``TESTED_WITH``), not the code that calls it.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch

from biomoe.compat import lightning as lightning_compat
from biomoe.compat import torch as torch_compat
from conftest import ROOT


def test_torch_internals_exist_and_compute():
    assert torch_compat.has_grouped_mm()
    tensors = [torch.full((3,), 2.0), torch.full((4,), 1.0, dtype=torch.bfloat16)]
    norms = torch_compat.foreach_norm(tensors[:1])
    torch.testing.assert_close(norms[0], torch.tensor(12.0).sqrt())
    torch_compat.foreach_mul_(tensors[:1], torch.tensor(0.5))
    assert torch.equal(tensors[0], torch.ones(3))
    bf16 = [torch.zeros(3, dtype=torch.bfloat16), torch.zeros(2, dtype=torch.bfloat16)]
    torch_compat.foreach_copy_(bf16, [torch.full((3,), 1.00390625), torch.full((2,), -3.0)])  # casts
    assert bf16[0].dtype == torch.bfloat16 and torch.equal(bf16[1], torch.full((2,), -3.0, dtype=torch.bfloat16))
    rows = torch.randn(5, 8)
    weights = torch.randn(2, 8, 4)
    offsets = torch.tensor([2, 5], dtype=torch.int32)
    out = torch_compat.grouped_mm(rows, weights, offsets)
    torch.testing.assert_close(out, torch.cat([rows[:2] @ weights[0], rows[2:] @ weights[1]]))
    from torch.distributed.checkpoint import default_planner, state_dict_loader
    from torch.distributed.device_mesh import DeviceMesh

    assert hasattr(DeviceMesh, "_flatten")
    assert hasattr(default_planner, "_EmptyStateDictLoadPlanner")
    assert hasattr(state_dict_loader, "_load_state_dict")


@pytest.mark.parametrize("class_path, methods", sorted(lightning_compat.OVERRIDDEN.items()))
def test_overridden_lightning_methods_exist(class_path, methods):
    module, _, name = class_path.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    for method in methods:
        assert callable(getattr(cls, method, None)), f"{class_path}.{method} is gone"


@pytest.mark.slow
def test_subcommand_parser_and_logger_internals():
    """cli.py --help lists every subcommand through the parser internals, and a Trainer answers
    whether it logs this step."""
    import subprocess
    import sys

    import lightning as L

    from biomoe.cli.commands import EXTRA_COMMANDS

    root = ROOT
    result = subprocess.run([sys.executable, str(root / "cli.py"), "--help"], capture_output=True, text=True,
                            cwd=root, timeout=120)
    assert result.returncode == 0, result.stderr[-1000:]
    for name in EXTRA_COMMANDS:
        assert name in result.stdout
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    assert lightning_compat.logs_this_step(trainer) in (True, False)


def test_the_trainer_binds_model_logging_onto_callbacks_and_it_can_be_dropped(tmp_path):
    """Lightning attaches the module's ``log``/``log_dict`` to each callback at fit start; a callback
    kept after the fit (the benchmark's step timer) must let go of them, or the model stays alive."""
    import lightning as L

    class Keep(L.Callback):
        pass

    callback = Keep()
    from lightning.pytorch.demos.boring_classes import BoringModel

    model = BoringModel()
    trainer = L.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, callbacks=[callback],
                        default_root_dir=tmp_path)
    trainer.fit(model)
    for attr in lightning_compat.MODEL_LOGGING_ATTRIBUTES:
        assert getattr(callback, attr).__self__ is model
    lightning_compat.detach_model_logging(callback)
    assert not any(attr in vars(callback) for attr in lightning_compat.MODEL_LOGGING_ATTRIBUTES)


def test_model_checkpoint_saves_through_save_checkpoint_with_hooks_inside_after_other_callbacks(tmp_path):
    """``BestCheckpoint`` trims only the files it writes: Lightning must write each of them through
    ``_save_checkpoint(trainer, filepath)``, run the callbacks' ``on_save_checkpoint`` inside that
    call, and run a checkpoint callback's hook after every other callback's (the EMA's)."""
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.demos.boring_classes import BoringModel

    seen: list[str] = []

    class Other(L.Callback):
        def on_save_checkpoint(self, trainer, pl_module, checkpoint):
            seen.append("other")

    class Wrapping(ModelCheckpoint):
        def _save_checkpoint(self, trainer, filepath):
            seen.append(f"enter {Path(filepath).name}")
            super()._save_checkpoint(trainer, filepath)
            seen.append("leave")

        def on_save_checkpoint(self, trainer, pl_module, checkpoint):
            seen.append("mine" if "optimizer_states" in checkpoint else "mine without optimizer")

    trainer = L.Trainer(accelerator="cpu", max_steps=2, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path,
                        callbacks=[Wrapping(dirpath=tmp_path, filename="best", every_n_train_steps=2), Other()])
    trainer.fit(BoringModel())
    assert seen == ["enter best.ckpt", "other", "mine", "leave"], seen


def test_every_compat_module_says_what_it_was_tested_with():
    import pkgutil

    import biomoe.compat

    names = [m.name for m in pkgutil.iter_modules(biomoe.compat.__path__)]
    assert {"torch", "lightning", "transformer_engine"} <= set(names)
    for name in names:
        module = importlib.import_module(f"biomoe.compat.{name}")
        assert module.TESTED_WITH and all(isinstance(v, str) for v in module.TESTED_WITH), name


def test_checkpoint_wrapper_unwraps_to_the_block():
    block = torch.nn.Linear(4, 4)
    wrapped = torch_compat.checkpoint_wrapper(block)
    assert torch_compat.checkpoint_wrapped(wrapped) is block
    assert torch_compat.checkpoint_wrapped(block) is block
    assert set(wrapped.state_dict()) == set(block.state_dict())  # why biomoe uses this wrapper


def test_fused_optimizers_say_they_skip_on_found_inf():
    params = [torch.nn.Parameter(torch.ones(3))]
    assert torch_compat.step_supports_amp_scaling(torch.optim.AdamW(params, fused=True))
    assert not torch_compat.step_supports_amp_scaling(torch.optim.AdamW(params, foreach=False))
    assert not torch_compat.step_supports_amp_scaling(object())


def test_trainer_of_a_module_or_callback_is_none_until_attached():
    import lightning as L
    from lightning.pytorch.callbacks import RichProgressBar

    module, bar = L.LightningModule(), RichProgressBar()
    assert lightning_compat.attached_trainer(module) is None
    assert lightning_compat.attached_trainer(bar) is None
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    module.trainer = trainer
    assert lightning_compat.attached_trainer(module) is trainer


def test_device_mesh_reaches_the_strategy_and_its_module():
    """What ExpertParallelStrategy.setup_environment relies on: ModelParallelStrategy's process-group
    set-up is a method of its own, and its ``device_mesh`` (and the module's) read what we set."""
    import lightning as L
    from lightning.pytorch.strategies import ModelParallelStrategy

    assert callable(getattr(ModelParallelStrategy, "_setup_distributed", None))
    strategy = ModelParallelStrategy()
    module = L.LightningModule()
    strategy._lightning_module = module  # what the Trainer's connect() does
    mesh = object()
    lightning_compat.set_device_mesh(strategy, mesh)
    assert strategy.device_mesh is mesh and module.device_mesh is mesh


def test_private_frames_user_errors_looks_for_still_exist():
    from lightning.pytorch.cli import LightningCLI
    from lightning.pytorch.trainer.connectors.checkpoint_connector import _CheckpointConnector

    owners = (LightningCLI, _CheckpointConnector)
    for name in lightning_compat.BUILD_PHASE_FRAMES + lightning_compat.CHECKPOINT_SELECTION_FRAMES:
        assert any(callable(getattr(cls, name, None)) for cls in owners), f"Lightning renamed {name}"


def test_elementwise_foreach_helpers_work_on_dtensor_shards(tmp_path):
    """Masters, moving averages and clipping of FSDP2 parameters are DTensors; torch's
    multi-tensor ops have no DTensor rule on every version, so the helpers act on the shards."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        param = distribute_tensor(torch.zeros(4, 2, dtype=torch.bfloat16), mesh, [Shard(0)])
        master = distribute_tensor(torch.full((4, 2), 1.5), mesh, [Shard(0)])
        torch_compat.foreach_copy_([param], [master])
        assert torch.equal(param.full_tensor(), torch.full((4, 2), 1.5, dtype=torch.bfloat16))
        torch_compat.foreach_mul_([master], torch.tensor(2.0))
        assert torch.equal(master.full_tensor(), torch.full((4, 2), 3.0))
        torch_compat.foreach_ema_([master], [param], 0.5)  # fp32 average of bf16 weights
        assert torch.equal(master.full_tensor(), torch.full((4, 2), 2.25))
    finally:
        dist.destroy_process_group()


def test_eager_when_compiled_runs_eagerly_inside_a_compiled_region():
    """Outside torch.compile the function is called as it is; inside a compiled function it is
    not traced (it sees no compilation) while an undecorated neighbour is."""
    from biomoe.compat.torch import eager_when_compiled

    seen: list[bool] = []

    @eager_when_compiled
    def probe(x):
        seen.append(torch.compiler.is_compiling())
        return x * 2

    def traced(x):
        seen.append(torch.compiler.is_compiling())
        return x

    assert probe(torch.ones(2)).tolist() == [2.0, 2.0] and seen == [False]
    compiled = torch.compile(lambda x: probe(x + 1) + traced(x), backend="eager")
    assert compiled(torch.ones(3)).tolist() == [5.0, 5.0, 5.0]
    assert seen == [False, False, True]


def test_the_flash_op_takes_a_causal_flag_and_the_lower_right_path_leaves_the_cpu_alone():
    """``flash_lower_right`` calls the flash op with its causal flag (lower right when keys outnumber
    queries; tests/gpu/test_shared_prefix_gpu.py checks that on a GPU) and answers None where it
    cannot run, so the caller's own path computes."""
    schema = torch.ops.aten._scaled_dot_product_flash_attention.default._schema
    names = [argument.name for argument in schema.arguments]
    assert names[:6] == ["query", "key", "value", "dropout_p", "is_causal", "return_debug_mask"]
    assert schema.returns[0].name == "output"
    q, kv = torch.randn(1, 2, 3, 64, dtype=torch.bfloat16), torch.randn(1, 2, 5, 64, dtype=torch.bfloat16)
    assert torch_compat.flash_lower_right(q, kv, kv) is None  # a CPU tensor
    params = torch_compat.flash_capability_params(q, kv, kv)
    # asked with the causal flag, the capability check would refuse every continued pass (keys > queries)
    assert params.is_causal is False and params.attn_mask is None and params.query is q
    assert params.enable_gqa is False
    grouped = torch_compat.flash_capability_params(torch.randn(1, 4, 3, 64, dtype=torch.bfloat16), kv, kv)
    assert grouped.enable_gqa is True  # two key/value heads for four query heads, read in place


def test_a_read_back_of_a_stored_buffer_waits_for_every_warp(monkeypatch):
    """Inductor's kernel ``load`` gets a barrier in the kernel's body before reading a buffer that
    the same kernel stored in an earlier reduction loop (its CSE's invalidated stores), and only
    then; installing twice patches once, and compiling blocks installs it on inductor's own class."""
    from types import SimpleNamespace

    from biomoe.compat.inductor import barrier_before_read_back

    class Lines(list):
        def writeline(self, line) -> None:
            self.append(line)

    class Kernel:
        def __init__(self) -> None:
            self.cse = SimpleNamespace(invalidated_stores={"buf1"})
            self.body = Lines()
            self.read: list[str] = []

        def load(self, name, index):
            self.body.append(f"load {name}")
            self.read.append(name)
            return f"tmp_{name}"

    assert barrier_before_read_back(Kernel) and barrier_before_read_back(Kernel)
    kernel = Kernel()
    assert kernel.load("buf0", 0) == "tmp_buf0" and kernel.body == ["load buf0"]
    assert kernel.load("buf1", 0) == "tmp_buf1"
    assert [getattr(line, "line", line) for line in kernel.body] == ["load buf0", "tl.debug_barrier()", "load buf1"]
    assert kernel.read == ["buf0", "buf1"]  # the original load still runs, once per call

    from torch._inductor.codegen.triton import TritonKernel

    from biomoe.model.compile import apply_compile

    monkeypatch.setattr(TritonKernel, "load", lambda self, name, index: None)  # as before any install
    apply_compile(_no_blocks())
    assert getattr(TritonKernel.load, "_biomoe_barrier_before_read_back", False)


def _no_blocks() -> torch.nn.Module:
    model = torch.nn.Module()
    model.blocks = torch.nn.ModuleList()
    return model
