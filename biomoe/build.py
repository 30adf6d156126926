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
import dataclasses
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from biomoe.backends.select import BackendSelection, select_backends
from biomoe.backends.te.precision import PrecisionContext
from biomoe.errors import ConfigError
from biomoe.model.activation_checkpointing import apply_activation_checkpointing, check_precision_for_checkpointing
from biomoe.model.compile import apply_compile
from biomoe.model.backends import TORCH_BACKENDS, LayerBackends
from biomoe.model.config import ModelConfig, RuntimeConfig
from biomoe.model.moe.experts import EXPERT_BACKENDS
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

    if plan is not None:
        check_bias_balancing(plan.load_balancing, config.router_bias_update_rate)
    if model is None:
        model = MoETransformer(config, selection.backends)
    else:  # a plain model the caller built (e.g. given weights): it keeps its own kernels, and the
        # line and the precision recipe say what they are; it gets the same parallel steps, in order
        selection = selection_of(model, selection)
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


def check_bias_balancing(load_balancing: str, bias_update_rate: float) -> None:
    """The expert bias is replicated on every rank and moved by the load its statistics see: only
    ``global`` statistics are the same on every rank, with ``ep`` or ``local`` the copies drift apart."""
    if bias_update_rate > 0 and load_balancing != "global":
        raise ConfigError(f"model.config.router_bias_update_rate: {bias_update_rate} needs the strategy's "
                          f"load_balancing: global (it is {load_balancing}: each rank's expert bias would "
                          "follow its own load and drift apart); set load_balancing: global or the rate to 0")


_TORCH_KERNEL_NAMES = {TORCH_BACKENDS.norm: "torch nn.RMSNorm", None: "torch SDPA", TORCH_BACKENDS.router: "torch",
                       TORCH_BACKENDS.dispatcher: "torch argsort"}


def layers_of(model: MoETransformer) -> LayerBackends:
    """The kernels ``model`` was constructed with, read from its layers."""
    attention = model.blocks[0].attn.core_attention
    moe = model.moe_layers()
    return LayerBackends(norm=type(model.norm),
                         core_attention=None if attention is None else type(attention),
                         router=type(moe[0].router) if moe else TORCH_BACKENDS.router,
                         dispatcher=type(moe[0].dispatcher) if moe else TORCH_BACKENDS.dispatcher,
                         experts=moe[0].experts.backend_name if moe else TORCH_BACKENDS.experts)


def _kernel_name(kind: object) -> str:
    if kind in _TORCH_KERNEL_NAMES:
        return _TORCH_KERNEL_NAMES[kind]
    named = getattr(kind, "backend_name", None) or getattr(kind, "name", None)
    return named or getattr(kind, "__qualname__", str(kind))


def _uses_te(backends: LayerBackends) -> bool:
    layers = (backends.norm, backends.core_attention, backends.router, backends.dispatcher)
    return (any(getattr(layer, "__module__", "").startswith("biomoe.backends.te") for layer in layers)
            or EXPERT_BACKENDS.spec(backends.experts).uses_precision_recipe)


def selection_of(model: MoETransformer, selection: BackendSelection) -> BackendSelection:
    """``selection`` as a given model really runs: its own layers in the kernels line, and TE's
    precision recipe only when one of them computes in it (else nothing computes in the recipe)."""
    given = layers_of(model)
    if given == selection.backends:
        return selection
    paths = dict(selection.paths)
    for key, field_name in (("norm", "norm"), ("attention", "core_attention"), ("router", "router"),
                            ("dispatch", "dispatcher")):
        if getattr(given, field_name) != getattr(selection.backends, field_name):
            paths[key] = _kernel_name(getattr(given, field_name)) + " (the given model's)"
    if given.experts != selection.backends.experts:
        paths["experts"] = f"{given.experts} (the given model's)"
    precision = selection.precision
    if precision.use_te and not _uses_te(given):
        precision = PrecisionContext("bf16", use_te=False)  # the line then names the trainer's precision
    paths.pop("layers", None)  # why auto chose torch: about the selection, not this model
    return dataclasses.replace(selection, backends=given, precision=precision, paths=paths)
