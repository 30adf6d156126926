"""Build a model ready to train or run: one function, one order, used everywhere.

:func:`build_model` is called by the LightningModule (``configure_model``), by the benchmark and
by the inference tools, so the model that is benchmarked is the model that is trained. The order
is torchtitan's:

1. kernels: :func:`~biomoe.backends.select.select_backends` decides precision and TE/torch per
   layer for this device, and the plain model is constructed with those layers;
2. expert parallelism (experts split over ``ep``, all-to-all dispatch, router statistics);
3. activation checkpointing;
4. ``torch.compile`` per block;
5. FSDP2 over the data ranks, then materialisation of meta-device weights.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from biomoe.backends.select import BackendSelection, select_backends
from biomoe.model.activation_checkpointing import apply_activation_checkpointing, check_precision_for_checkpointing
from biomoe.model.compile import apply_compile
from biomoe.model.config import ModelConfig, RuntimeConfig
from biomoe.model.transformer import MoETransformer

if TYPE_CHECKING:  # imported where a plan is applied: FSDP and DTensor take most of a second to import
    from biomoe.parallel.parallelize import ParallelPlan

log = logging.getLogger(__name__)


@dataclass
class BuiltModel:
    """The model and what it runs with; :meth:`autocast` wraps every forward."""

    model: MoETransformer
    selection: BackendSelection
    announce: Callable[[str], None] = log.info
    _confirmed: bool = field(default=False, repr=False)

    @property
    def precision(self) -> str:
        return self.selection.precision.name

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        """The precision recipe (``te.autocast``; nothing for bf16); after the first forward,
        says once which TE kernels really ran, not only which were configured."""
        with _fp32_default_dtype(self.selection.precision.recipe is not None), self.selection.precision.autocast():
            yield
        if not self._confirmed:
            self._confirmed = True
            self.announce("biomoe, first forward ran: " + kernels_that_ran(self.model))


@contextlib.contextmanager
def _fp32_default_dtype(active: bool) -> Iterator[None]:
    """Under an FP8 recipe, tensors created without a dtype are fp32 again.

    Lightning's ``bf16-true`` makes bf16 the default dtype for the whole forward; Transformer
    Engine creates its FP8 scaling state (scales, amax histories, block scales) with the default
    dtype, and in bf16 those overflow or lose the precision the recipe needs (non-finite gradients
    from the first step). biomoe's own code always names its dtypes, so only TE sees the change.
    """
    if not active or torch.get_default_dtype() == torch.float32:
        yield
        return
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def kernels_that_ran(model: torch.nn.Module) -> str:
    seen: dict[str, int] = {}
    for module in model.modules():
        core = getattr(module, "core_attention", None)
        if core is not None:
            seen["te attention calls"] = seen.get("te attention calls", 0) + core.calls_te
            seen["sdpa fallback calls"] = seen.get("sdpa fallback calls", 0) + core.calls_fallback
        backend = getattr(module, "backend", None)
        fused_path = getattr(backend, "fused_path", None)
        if fused_path is not None:
            seen[f"te_fused: {fused_path}"] = seen.get(f"te_fused: {fused_path}", 0) + 1
        if getattr(backend, "_built_for", None) is not None:
            seen[f"experts built: {backend.name}"] = seen.get(f"experts built: {backend.name}", 0) + 1
    return ", ".join(f"{k} x{v}" for k, v in seen.items()) or "torch only"


def build_model(config: ModelConfig, runtime: RuntimeConfig | None = None,
                device: torch.device | str | None = None, plan: ParallelPlan | None = None,
                announce: Callable[[str], None] = log.info, trainer_precision: str | None = None,
                model: MoETransformer | None = None, selection: BackendSelection | None = None) -> BuiltModel:
    """Assemble the model for ``device`` (where its kernels will run) and the parallel ``plan``.
    ``trainer_precision`` (Lightning's) only makes the announced line say what really computes.
    ``selection`` is the kernel choice for ``config``, ``runtime`` and ``device`` when the caller
    has made it already (the inference loader, which builds ``model`` with its layers): the
    kernels are chosen once per model.

    Parameters are created in the ambient device/dtype context (Lightning's
    ``tensor_init_context``; the meta device for models too large for one rank), so the caller
    decides where weights first live; meta weights are materialised on ``device`` at the end.
    """
    runtime = runtime or RuntimeConfig()
    device = torch.device(device) if device is not None else torch.device("cpu")
    selection = selection or select_backends(config, runtime, device)
    if runtime.activation_checkpointing and selection.precision.use_te:
        check_precision_for_checkpointing(selection.precision.name)

    if model is None:
        model = MoETransformer(config, selection.backends)
    # else: a plain model the caller built (e.g. given weights); it keeps its own kernels and gets
    # the same parallel steps, in the same order.
    if plan is not None:
        from biomoe.parallel.parallelize import apply_expert_parallelism

        apply_expert_parallelism(model, plan)
    if runtime.activation_checkpointing:
        apply_activation_checkpointing(model)
    if runtime.compile:
        apply_compile(model, **({} if runtime.compile_mode == "default" else {"mode": runtime.compile_mode}))
    if plan is not None:
        from biomoe.parallel.parallelize import apply_data_parallelism

        apply_data_parallelism(model, plan)
    if any(p.is_meta for p in model.parameters()):
        from biomoe.parallel.parallelize import materialize

        materialize(model, device)
    announce(selection.summary(trainer_precision))
    return BuiltModel(model, selection, announce)
