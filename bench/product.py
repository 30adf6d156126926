"""The product path in the benchmark: ``cli.py fit`` on a shipped config, timed step by step.

The Trainer, model, callbacks, logger, precision plugin, gradient clipping, optimizer and LR
schedule are built by biomoe's own LightningCLI for the ``fit`` subcommand from the shipped config, with
only the benchmark's shape, precision, genome and step count given as overrides on the command line,
exactly as a user would give them. The headline row (``biomoe-cli``) then trains on the
``GenomeDataModule`` the CLI built from the benchmark's genome, with the config's own loader
settings (workers, stride, reverse complements, mutations): what a user's fit reads. The diagnostic
rows (``biomoe-cli-repeated`` and the variants that isolate one cost) train on an in-memory loader
that yields the benchmark's token batch every step (the tokens the other contenders see), through a
``DataLoader`` with the same pinned host memory as the genome loader, so Lightning's host-to-device
copy is the real one; the gap between ``biomoe-cli`` and ``biomoe-cli-repeated`` is what the data
path costs.

Three things differ from a user's run, all outside the timed steps: the fit ends right after the
last timed step (no end-of-training checkpoint or summary: building a 2-layer Mixtral checkpoint
with fp32 master weights means ~40 GB of state, and it says nothing about the step), checkpoint
files that a callback saves earlier are not written (:class:`DiscardCheckpointIO` drops the
bytes), and no validation runs (``trainer.limit_val_batches=0``: a benchmark fit is shorter than
one validation interval of a real run). Each row records how long the CLI took to reach its first
step (``setup_s``).
"""

from __future__ import annotations

import importlib
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml
from lightning.pytorch.plugins.io import CheckpointIO
from torch.utils.data import DataLoader, Dataset

from bench.shapes import BenchShape
from bench.timing import KernelCounter, StepClock
from biomoe.cli.lightning_cli import BioMoECLI, run_lightning_cli
from biomoe.compat.lightning import detach_model_logging

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "configs" / "dna-small.yaml"
BUNDLED_FASTA = ROOT / "data" / "lambda_virus.fa.gz"
"""Given as ``data.fasta`` so the datamodule the CLI builds points at a file that exists everywhere;
its windows are never read (fit gets the in-memory loader)."""


@dataclass(frozen=True)
class CliVariant:
    """A ``biomoe-cli`` contender: the shipped config, plus these overrides."""

    about: str
    extra_args: tuple[str, ...] = ()
    drop_config_callbacks: bool = False
    genome_data: bool = False
    """Train on the GenomeDataModule the CLI builds (the real loader), not the repeated batch."""


CLI_VARIANTS: dict[str, CliVariant] = {
    "biomoe-cli": CliVariant("the shipped config as `cli.py fit` runs it, on the benchmark genome through "
                             "the config's GenomeDataModule (the real data path)", genome_data=True),
    "biomoe-cli-repeated": CliVariant(
        "biomoe-cli on the other contenders' token batch, repeated from memory: the step without the "
        "data path (the variants below differ from this row in one thing each)"),
    "biomoe-cli-nocallbacks": CliVariant(
        "the shipped config without its trainer.callbacks (NonFiniteGuard, RouterCollapseMonitor, "
        "ModelCheckpoint, LearningRateMonitor): what the shipped callback set costs",
        drop_config_callbacks=True),
    "biomoe-cli-nomaster": CliVariant(
        "the shipped config with model.optim.master_weights=false: bf16 weights updated in place, "
        "no fp32 master copy (what the master weights cost)",
        extra_args=("--model.optim.master_weights=false",)),
    "biomoe-cli-torchmaster": CliVariant(
        "the shipped config with model.optim.backend=torch: fp32 masters updated by torch's fused AdamW "
        "after a gradient cast, then copied back (what TE's fused master-weight kernel saves)",
        extra_args=("--model.optim.backend=torch",)),
    "biomoe-cli-bf16moments": CliVariant(
        "the shipped config with model.optim.moment_dtype=bf16: fp32 masters, bf16 AdamW moments",
        extra_args=("--model.optim.moment_dtype=bf16",)),
    "biomoe-cli-remainder": CliVariant(
        "the shipped config with model.optim.master_storage=remainder: each fp32 master kept as the "
        "16 bits its bf16 weight lacks (half the masters' memory)",
        extra_args=("--model.optim.master_storage=remainder",)),
    "biomoe-cli-bf16first": CliVariant(
        "the shipped config with model.optim.moment_dtype=bf16-first: fp32 masters, the first AdamW "
        "moment in bf16, the second in fp32", extra_args=("--model.optim.moment_dtype=bf16-first",)),
    "biomoe-cli-compiled-adamw": CliVariant(
        "the shipped config with model.optim.backend=compiled: the fp32-master AdamW update generated by "
        "torch.compile (one kernel per parameter)", extra_args=("--model.optim.backend=compiled",)),
    "biomoe-cli-compiled-remainder": CliVariant(
        "biomoe-cli-compiled-adamw with model.optim.master_storage=remainder (each master as the 16 bits "
        "its bf16 weight lacks, split and joined inside the generated kernel)",
        extra_args=("--model.optim.backend=compiled", "--model.optim.master_storage=remainder")),
    "biomoe-cli-compiled-all": CliVariant(
        "biomoe-cli-compiled-adamw with model.runtime.compile=true (every block through torch.compile too)",
        extra_args=("--model.optim.backend=compiled", "--model.runtime.compile=true")),
    "biomoe-cli-ep": CliVariant(
        "biomoe-cli-repeated under ExpertParallelStrategy with expert_parallel_size 1: what the "
        "strategy costs where there is one device (nothing to split or exchange)",
        extra_args=("--trainer.strategy=biomoe.parallel.strategy.ExpertParallelStrategy",
                    "--trainer.strategy.expert_parallel_size=1", "--trainer.inference_mode=false")),
    "biomoe-cli-compile": CliVariant(
        "the shipped config with model.runtime.compile=true: every block through torch.compile, "
        "Transformer Engine calls left eager (compilation falls in the warm-up steps)",
        extra_args=("--model.runtime.compile=true",)),
    "biomoe-cli-graphs": CliVariant(
        "biomoe-cli with model.runtime.compile=true and compile_mode=reduce-overhead: each block compiled "
        "and replayed as CUDA graphs where its kernels are traceable", genome_data=True,
        extra_args=("--model.runtime.compile=true", "--model.runtime.compile_mode=reduce-overhead")),
    "biomoe-cli-graphs-torch": CliVariant(
        "biomoe-cli-graphs with torch norm, attention, router and dispatch kernels (no TE call inside a "
        "block, so each block is one graph)", genome_data=True,
        extra_args=("--model.runtime.compile=true", "--model.runtime.compile_mode=reduce-overhead",
                    "--model.runtime.norm_backend=torch", "--model.runtime.attention_backend=torch",
                    "--model.runtime.router_backend=torch", "--model.runtime.dispatch_backend=torch")),
    "biomoe-cli-bf16-true": CliVariant(
        "biomoe-cli with trainer.precision=bf16-true: bf16 weights, fp32 master weights in the optimizer "
        "(for recipes that train bf16-mixed)", extra_args=("--trainer.precision=bf16-true",), genome_data=True),
    "biomoe-cli-bf16-mixed": CliVariant(
        "the shipped config with trainer.precision=bf16-mixed: fp32 weights cast by autocast at every op",
        extra_args=("--trainer.precision=bf16-mixed",)),
}


def read_config(path: Path) -> dict[str, Any]:
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


def config_expert_backend(config: dict[str, Any]) -> str:
    """The expert kernels the config asks for (``model.runtime.expert_backend``, default ``auto``)."""
    model = config.get("model") or {}
    runtime = model.get("runtime") or {}
    return str(runtime.get("expert_backend", (model.get("config") or {}).get("expert_backend", "auto")))


def cli_args(config_path: Path, shape: BenchShape, precision: str, max_steps: int, root: Path,
             accelerator: str, variant: CliVariant, extra: tuple[str, ...] = (),
             fasta: Path | None = None) -> list[str]:
    """The command line (after ``cli.py fit``) that trains ``shape`` with the shipped config; the
    genome rows read ``fasta`` with the config's loader settings."""
    config = read_config(config_path)
    # The repeated-batch rows build the same data module (callbacks read it), without loader workers.
    data_args = [f"--data.fasta={fasta or BUNDLED_FASTA}", *([] if variant.genome_data else ["--data.num_workers=0"])]
    args = [f"--config={config_path}",
            f"--trainer.max_steps={max_steps}",
            f"--trainer.accelerator={accelerator}",
            "--trainer.devices=1",
            "--trainer.num_sanity_val_steps=0",
            "--trainer.limit_val_batches=0",
            f"--trainer.default_root_dir={root}",
            f"--model.config.vocab_size={shape.vocab}",
            f"--model.config.hidden_size={shape.hidden}",
            f"--model.config.num_layers={shape.layers}",
            f"--model.config.num_heads={shape.heads}",
            f"--model.config.num_kv_heads={shape.kv_heads}",
            f"--model.config.num_experts={shape.experts}",
            f"--model.config.top_k={shape.top_k}",
            f"--model.config.ffn_hidden_size={shape.ffn}",
            f"--model.runtime.precision={precision}",
            *data_args,
            f"--data.seq_length={shape.seq}",
            f"--data.batch_size={shape.micro_batch}"]
    shipped_precision = (config.get("trainer") or {}).get("precision")
    if shipped_precision is not None:  # as shipped, also on a CPU (where the CLI would pick fp32 unless told)
        args.append(f"--trainer.precision={shipped_precision}")
    logger = (config.get("trainer") or {}).get("logger")
    if isinstance(logger, dict) and "save_dir" in (logger.get("init_args") or {}):
        args.append(f"--trainer.logger.init_args.save_dir={root}")
    return args + list(variant.extra_args) + list(extra)


class RepeatedBatch(Dataset):
    """The same batch ``length`` times (``batch_size=None`` loaders pass items through whole)."""

    def __init__(self, batch: dict[str, torch.Tensor], length: int) -> None:
        self.batch = batch
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.batch


def token_loader(ids: torch.Tensor, labels: torch.Tensor, steps: int) -> DataLoader:
    """Batches as :class:`~biomoe.data.datamodule.GenomeDataModule` yields them (input_ids, labels,
    loss_mask on the host, pinned when CUDA is present), holding the benchmark's tokens."""
    batch = {"input_ids": ids.cpu(), "labels": labels.cpu(),
             "loss_mask": torch.ones_like(labels, dtype=torch.bool, device="cpu")}
    return DataLoader(RepeatedBatch(batch, steps), batch_size=None, num_workers=0,
                      pin_memory=torch.cuda.is_available())


class StepTimer(L.Callback):
    """Marks each training batch's start (first of all callbacks) and end; keeps the losses.

    Put it first in ``trainer.callbacks`` and :attr:`end_mark` last, so a step's marks enclose
    every other hook of that step."""

    def __init__(self, device: torch.device, stop_after: int | None = None) -> None:
        self.clock = StepClock(device)
        self.kernels = KernelCounter(device)
        """Counts the kernels of the last step; the one before it (it closes the last timed step)
        is the step whose host time is taken with the device drained."""
        self.losses: list[torch.Tensor] = []
        self.end_mark = _EndMark(self)
        self.stop_after = stop_after
        self.first_step_at: float | None = None
        self.optimizer_info: dict[str, Any] | None = None

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if self.first_step_at is None:
            self.first_step_at = time.perf_counter()
        self.clock.start()
        if self.stop_after is not None and len(self.clock.starts) == self.stop_after - 1:
            self.clock.drained_start()
        if self.stop_after is not None and len(self.clock.starts) == self.stop_after:
            self.kernels.start()


def describe_optimizer(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """What a bench record says of the optimizer: its class and whether its kernel is fused."""
    fused = bool(getattr(optimizer, "fused", None) or optimizer.param_groups[0].get("fused"))
    fused = fused or any(cls.__name__ == "FusedAdam" for cls in type(optimizer).__mro__)  # TE's: always fused
    return {"optimizer": type(optimizer).__name__, "fused": fused}


class TimedStepsDone(Exception):
    """Raised after the last timed step to end the fit there (caught by the benchmark)."""


class _EndMark(L.Callback):
    def __init__(self, timer: StepTimer) -> None:
        self.timer = timer

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        self.timer.clock.drained_end()  # no-op except on the drained step
        self.timer.clock.end()
        if self.timer.stop_after is not None and len(self.timer.clock.ends) >= self.timer.stop_after:
            self.timer.kernels.stop()
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):
            self.timer.losses.append(loss.detach())
        if self.timer.stop_after is not None and len(self.timer.losses) >= self.timer.stop_after:
            # Lightning's teardown would copy the optimizer state (fp32 masters and moments, tens
            # of GB for the Mixtral shape) to the host: minutes of benchmark time after the last
            # timed step. Hand the strategy no optimizer and keep only a description of it, so its
            # state does not outlive the row either.
            optimizer = trainer.optimizers[0] if trainer.optimizers else None
            self.timer.optimizer_info = None if optimizer is None else describe_optimizer(optimizer)
            trainer.strategy.optimizers = []
            raise TimedStepsDone


class DiscardCheckpointIO(CheckpointIO):
    """Builds nothing on disk: the benchmark's checkpoints would be tens of GB and are not read."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        return None

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: Any = None) -> dict[str, Any]:
        raise RuntimeError("the benchmark does not load checkpoints")

    def remove_checkpoint(self, path: Any) -> None:
        return None


def config_callback_classes(config: dict[str, Any]) -> tuple[type, ...]:
    """The classes named in the config's ``trainer.callbacks`` (the shipped callback set)."""
    classes = []
    for entry in (config.get("trainer") or {}).get("callbacks") or []:
        path = entry.get("class_path") if isinstance(entry, dict) else None
        if path:
            module, _, name = path.rpartition(".")
            classes.append(getattr(importlib.import_module(module), name))
    return tuple(classes)


def release(cli: Any) -> None:
    """Drop what a finished CLI holds (model, trainer, datamodule, instantiated config).

    jsonargparse keeps the last parser in a context variable, and that parser's instantiators hold
    the CLI object: without this the model, its fp32 masters and optimizer moments of one row stay
    allocated through every later row and count in their peak memory."""
    for attr in ("model", "trainer", "datamodule", "config_init"):
        if hasattr(cli, attr):
            setattr(cli, attr, None)


@dataclass
class CliRun:
    step_ms: list[float]
    busy_ms: list[float]
    losses: list[float]
    details: dict[str, Any]
    host_ms: float | None = None
    kernels_per_step: int | None = None


def run_cli(config_path: Path, shape: BenchShape, precision: str, ids: torch.Tensor, labels: torch.Tensor,
            warmup: int, steps: int, variant: CliVariant, extra: tuple[str, ...] = (),
            fasta: Path | None = None) -> CliRun:
    """``cli.py fit`` with the shipped config: biomoe's LightningCLI parses, checks and builds
    everything for the ``fit`` subcommand (its ``before_fit`` checks and ``after_fit`` report run
    too); only the final ``trainer.fit`` call is the benchmark's, which adds the step timer and, for
    the diagnostic rows, feeds the in-memory batches. ``warmup + steps + 2`` steps in a scratch
    folder, removed afterwards."""
    device = ids.device
    accelerator = "gpu" if device.type == "cuda" else "cpu"
    total = warmup + steps + 2  # + the drained step and the counted step
    root = Path(tempfile.mkdtemp(prefix="biomoe-bench-"))
    args = cli_args(config_path, shape, precision, total, root, accelerator, variant, extra, fasta)
    details: dict[str, Any] = {"command": "cli.py fit " + " ".join(args)}
    started = time.perf_counter()
    timer = StepTimer(device, stop_after=total)
    dropped = config_callback_classes(read_config(config_path)) if variant.drop_config_callbacks else ()

    def timed_fit(cli: BioMoECLI, model: L.LightningModule, datamodule: Any = None, **kwargs: Any) -> None:
        trainer = cli.trainer
        trainer.callbacks[:] = [cb for cb in trainer.callbacks if type(cb) not in dropped]
        trainer.callbacks.insert(0, timer)
        trainer.callbacks.append(timer.end_mark)
        trainer.strategy.checkpoint_io = DiscardCheckpointIO()
        details.update(trainer_precision=str(trainer.precision), gradient_clip_val=trainer.gradient_clip_val,
                       log_every_n_steps=trainer.log_every_n_steps,
                       callbacks=[type(cb).__name__ for cb in trainer.callbacks
                                  if cb is not timer and cb is not timer.end_mark],
                       float32_matmul_precision=torch.get_float32_matmul_precision(),
                       init="cli.py fit's own (seed_everything from the config)",
                       checkpoint_writes="discarded (after the timed steps)")
        if variant.genome_data:
            details["data"] = f"GenomeDataModule on {fasta or BUNDLED_FASTA} (the config's loader settings)"
        else:
            # The data module stays (callbacks such as TrainingLength read it); only its training
            # loader is replaced.
            details["data"] = "the benchmark's token batch, repeated from memory"
            datamodule.train_dataloader = lambda: token_loader(ids, labels, total)
        try:
            trainer.fit(model, datamodule=datamodule)
        except TimedStepsDone:
            pass
        for callback in (timer, timer.end_mark):  # they outlive the fit: let go of the module
            detach_model_logging(callback)
        if timer.optimizer_info is None and trainer.optimizers:
            timer.optimizer_info = describe_optimizer(trainer.optimizers[0])
        details.update(timer.optimizer_info or {})
        param = next(iter(model.parameters()), None)
        if param is not None:
            details["weights_dtype"] = str(param.dtype).replace("torch.", "")
        selection = getattr(getattr(model, "built", None), "selection", None)
        if selection is not None and hasattr(selection, "summary"):
            details["kernels"] = selection.summary()

    bench_cli = type("BenchFitCLI", (BioMoECLI,), {"fit": timed_fit, "after_fit": lambda self: None})
    matmul_precision = torch.get_float32_matmul_precision()  # the CLI may set TF32: not for later rows
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
            cli = run_lightning_cli(["fit", *args], cli_class=bench_cli)
        release(cli)
        del cli
        if timer.first_step_at is not None:
            details["setup_s"] = round(timer.first_step_at - started, 1)
        return CliRun(timer.clock.step_ms(warmup, steps), timer.clock.busy_ms(warmup, steps),
                      [float(v) for v in timer.losses], details, timer.clock.host_ms,
                      timer.kernels.kernels)
    finally:
        torch.set_float32_matmul_precision(matmul_precision)
        shutil.rmtree(root, ignore_errors=True)
