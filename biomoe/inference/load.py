"""A checkpoint as a model ready to run: the one load path of every command that uses a trained model.

Scoring, embedding, variant effects, generation and routing all build the network as training
does: :func:`biomoe.build.build_model` with a :class:`~biomoe.model.config.RuntimeConfig`, and the
same ``biomoe kernels on ...`` line says which kernels run. Which kernels is chosen for inference,
by measurement, not copied from training (:data:`INFERENCE_LAYER_KERNELS`): in bf16 every layer runs
torch's kernels (SDPA attention, torch norm, router and dispatch, ``torch._grouped_mm`` experts)
unless the command names others (``--attention-backend te`` ...); an FP8/FP4 precision keeps the
recorded kernels, which its recipe needs.

What differs from training is also what inference does not need:

* weights are stored in the compute dtype (``bf16`` on a GPU: no fp32 master copy, no autocast
  casts per matmul), except the routers, which stay fp32 because small logit differences decide
  which experts a base goes to (training computes them in fp32 too);
* no activation checkpointing, no dropout (eval mode), no autograd (``torch.inference_mode``).

The default precision is ``bf16`` on a CUDA device and ``fp32`` on a CPU (the reference path, whose
numbers CI checks). ``fp32`` on a GPU runs the torch kernels in fp32 throughout, for comparison.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from biomoe.backends.select import BackendSelection, select_backends
from biomoe.build import BuiltModel, build_model
from biomoe.checkpoint.hparams import recorded_model_config
from biomoe.checkpoint.run_folder import resolve_checkpoint
from biomoe.checkpoint.verify import check_checkpoint_file, check_shapes, verify_checkpoint
from biomoe.errors import ConfigError, GenomeInputError
from biomoe.model.config import LAYER_BACKEND_FIELDS, ModelConfig, RuntimeConfig
from biomoe.model.meta import empty_on, meta_model
from biomoe.model.moe.router import TopKRouter
from biomoe.model.transformer import ModelOutput, MoETransformer
from biomoe.precisions import PRECISIONS, canonical_precision

__all__ = ["INFERENCE_PRECISIONS", "InferenceModel", "inference_runtime", "load_for_inference", "load_model",
           "prepare_model", "weights_dtype"]

INFERENCE_PRECISIONS: tuple[str, ...] = ("fp32", *PRECISIONS)
"""What ``--precision`` accepts: ``fp32`` (weights and compute in fp32, torch kernels) or one of
the training precisions (weights in bf16; an FP8/FP4 name also enters its TE recipe)."""

RUNTIME_OVERRIDES: tuple[str, ...] = ("expert_backend", *LAYER_BACKEND_FIELDS, "compile")
"""RuntimeConfig fields a command may set for inference (the rest do not apply to it)."""

INFERENCE_LAYER_KERNELS = "torch"
"""The layer kernels of the use commands in bf16 and fp32, whatever training used. Each command is
a fresh process, and Transformer Engine's import and first forward cost seconds of it: more than
its slightly faster layers buy back on a genome (figures: docs/benchmarks.md, "Kernels of the use
commands")."""


def default_precision(device: torch.device | str) -> str:
    """bf16 on a CUDA device, fp32 elsewhere."""
    return "bf16" if torch.device(device).type == "cuda" else "fp32"


def weights_dtype(precision: str) -> torch.dtype:
    return torch.float32 if precision == "fp32" else torch.bfloat16


def parse_inference_precision(name: str, key: str = "--precision") -> str:
    """``fp32`` or a training precision name, normalised; one line naming ``key`` otherwise."""
    normalised = canonical_precision(name)
    if normalised in ("fp32", "32", "32-true", "float32"):
        return "fp32"
    if normalised in ("bf16-true", "bf16-mixed", "bfloat16"):
        return "bf16"
    if normalised in PRECISIONS:
        return normalised
    raise ConfigError(f"{key}: {name!r} is unknown; choose one of {', '.join(INFERENCE_PRECISIONS)}")


def inference_runtime(device: torch.device | str, precision: str | None = None,
                      recorded: Mapping[str, Any] | RuntimeConfig | None = None,
                      overrides: Mapping[str, Any] | None = None,
                      config: ModelConfig | None = None) -> tuple[RuntimeConfig, str]:
    """``(RuntimeConfig, precision)`` for running a model on ``device``.

    ``recorded`` is the runtime the checkpoint was trained with: under an FP8/FP4 recipe its kernel
    choices are kept where they can run here; in bf16 and fp32 every layer runs torch's kernels
    (:data:`INFERENCE_LAYER_KERNELS`; TE kernels compute in bf16/fp16 only, and cost seconds of
    start-up). ``overrides`` are the user's, and one that cannot run here is an error, never a
    substitute."""
    runtime, precision, _ = _choose_kernels(torch.device(device), precision, recorded, overrides, config)
    return runtime, precision


def _choose_kernels(device: torch.device, precision: str | None,
                    recorded: Mapping[str, Any] | RuntimeConfig | None, overrides: Mapping[str, Any] | None,
                    config: ModelConfig | None) -> tuple[RuntimeConfig, str, BackendSelection]:
    """:func:`inference_runtime` and the kernels it selects (the model is built with these: they
    are selected once)."""
    precision = parse_inference_precision(precision) if precision is not None else default_precision(device)
    fields: dict[str, Any] = {}
    if isinstance(recorded, RuntimeConfig):
        recorded = dataclasses.asdict(recorded)
    for name in RUNTIME_OVERRIDES:
        if isinstance(recorded, Mapping) and name in recorded and name != "compile":
            fields[name] = recorded[name]
    if precision in ("fp32", "bf16"):  # the recorded layer kernels matter only to an FP8/FP4 recipe
        fields.update({name: INFERENCE_LAYER_KERNELS for name in LAYER_BACKEND_FIELDS})
    if precision == "fp32":
        fields["expert_backend"] = "grouped"  # the per-expert loop where _grouped_mm has no fp32 kernel
    elif precision == "bf16" and (fields.get("expert_backend") == "auto"
                                  or str(fields.get("expert_backend", "")).startswith("te")):
        # torch's grouped GEMM: TE's experts need its import, and the commands' speed was measured on
        # grouped (a training run's auto may have taken quack); --expert-backend picks another
        fields["expert_backend"] = "grouped"
    fields.update({k: v for k, v in (overrides or {}).items() if v is not None})
    runtime_precision = "bf16" if precision == "fp32" else precision
    config = config or ModelConfig()
    try:
        runtime = RuntimeConfig(precision=runtime_precision, **fields)
        return runtime, precision, select_backends(config, runtime, device)
    except (ConfigError, TypeError):
        pass
    # the recorded choices do not run here: auto for those, the user's choices kept
    fields = {k: v for k, v in fields.items() if k not in (recorded or {}) or k in (overrides or {})}
    runtime = RuntimeConfig(precision=runtime_precision, **fields)
    return runtime, precision, select_backends(config, runtime, device)


@dataclass
class InferenceModel:
    """A network ready to run: the module, what it was built with, and where it runs.

    Calling it runs a forward under ``torch.inference_mode`` and the precision recipe; the engines
    in :mod:`biomoe.inference` take it (or a bare :class:`MoETransformer`, wrapped by
    :meth:`wrap`)."""

    module: MoETransformer
    device: torch.device
    dtype: torch.dtype
    precision: str
    built: BuiltModel | None = None
    path: str | None = None
    compiled: bool = False
    """Whether its blocks run under ``torch.compile`` (those are traced for the shapes of whole
    windows; an engine that feeds other shapes, e.g. a KV-cache continuation, keeps whole windows)."""

    @property
    def config(self) -> ModelConfig:
        return self.module.config

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """inference mode + the precision recipe around a forward."""
        autocast = self.built.autocast() if self.built is not None else contextlib.nullcontext()
        with torch.inference_mode(), autocast:
            yield

    def __call__(self, input_ids: torch.Tensor, **kwargs: Any) -> ModelOutput:
        with self.running():
            return self.module(input_ids, **kwargs)

    @classmethod
    def wrap(cls, model: InferenceModel | MoETransformer) -> InferenceModel:
        """An InferenceModel as is; a bare module as it stands (its device and dtype, no recipe)."""
        if isinstance(model, InferenceModel):
            return model
        param = next(model.parameters())
        dtype = param.dtype
        return cls(model.eval(), param.device, dtype, "fp32" if dtype == torch.float32 else "bf16")


def _announce(line: str) -> None:
    """The kernel line goes to stdout, beside the command's other reports: stderr stays for the
    progress bar, warnings and the one-line errors."""
    print(line, flush=True)


def prepare_model(config: ModelConfig, state: Mapping[str, torch.Tensor] | None, device: torch.device | str,
                  precision: str | None = None, runtime: RuntimeConfig | None = None,
                  overrides: Mapping[str, Any] | None = None,
                  announce: Callable[[str], None] = _announce, path: str | None = None,
                  check: Callable[[MoETransformer], None] | None = None) -> InferenceModel:
    """Build ``config`` through :func:`build_model` on ``device`` and load ``state`` (``model.``
    prefix stripped) into it; ``runtime`` is the recorded one (see :func:`inference_runtime`).

    One descent: the kernels are selected once, the model is constructed once (with ``state``:
    on the meta device, then given memory and filled from ``state``, never initialised), and
    ``check`` sees it before it is filled (the loader compares the checkpoint's shapes with it)."""
    device = torch.device(device)
    runtime, precision, selection = _choose_kernels(device, precision, runtime, overrides, config)
    dtype = weights_dtype(precision)
    quiet: list[str] = []
    if state is None:
        with torch.device(device):
            built = build_model(config, runtime, device, announce=quiet.append, selection=selection)
        model = _in_inference_dtypes(built.model, dtype)
    else:
        model = meta_model(config, selection.backends)
        if check is not None:
            check(model)
        model = _allocated(model, device, dtype)
        model.load_state_dict(state)
        built = build_model(config, runtime, device, announce=quiet.append, model=model, selection=selection)
    model.eval().requires_grad_(False)
    built.announce = announce
    weights = "fp32" if dtype == torch.float32 else "bf16"
    announce(built.selection.summary(None).replace(
        "precision=no TE recipe (trainer.precision decides)", f"precision={weights} (no TE recipe)")
        + f" | weights={weights} | inference")
    return InferenceModel(model, device, dtype, precision, built, path, compiled=runtime.compile)


def _in_inference_dtypes(model: MoETransformer, dtype: torch.dtype) -> MoETransformer:
    model.to(dtype)
    for module in model.modules():  # routing decisions stay fp32 (see the module docstring)
        if isinstance(module, TopKRouter):
            module.float()
    return model


def _allocated(model: MoETransformer, device: torch.device, dtype: torch.dtype) -> MoETransformer:
    """A meta-device model's tensors allocated on ``device`` in the inference dtypes but not
    initialised: the checkpoint's weights overwrite every parameter, and a random initialisation
    first would cost about a second per 100 M parameters on a CPU. The router statistics
    (buffers no checkpoint holds) start at zero, as after ``build_model``."""
    model = _in_inference_dtypes(empty_on(model, device), dtype)
    for layer in model.moe_layers():
        layer.router.reset_stats()
    return model


def load_for_inference(ckpt_path: str | os.PathLike[str], device: torch.device | str = "cpu",
                       precision: str | None = None, overrides: Mapping[str, Any] | None = None,
                       announce: Callable[[str], None] = _announce) -> InferenceModel:
    """The model of a Lightning checkpoint (or of a run folder's best one), built to run on
    ``device`` in ``precision`` (default: bf16 on CUDA, fp32 on CPU). Every problem with the file
    is one :class:`~biomoe.errors.GenomeInputError` line naming it."""
    path = resolve_checkpoint(ckpt_path)  # a run folder -> its best checkpoint (said on stderr)
    check_checkpoint_file(path)
    if os.path.isdir(path):
        raise GenomeInputError(path, "is a folder (a distributed checkpoint?); this needs a checkpoint file: "
                                     f"python -m biomoe.checkpoint.distributed {path} model.ckpt")
    try:
        # integrity, structure and finite weights (skipped for a file verified before, unchanged
        # since), then shapes against its hyper-parameters on the model built to hold them: one line each
        ckpt = verify_checkpoint(path, shapes=False)
        cfg, source = recorded_model_config(path, ckpt), "its recorded model config"
        if cfg is None:
            cfg, source = ModelConfig(), "the default model config (the checkpoint records none)"
        weights = {k: v for k, v in ckpt["state_dict"].items() if k.startswith("model.")}
        state = {k[len("model."):]: v for k, v in weights.items()}
        hparams = ckpt.get("hyper_parameters") or {}
        recorded = hparams.get("runtime") if isinstance(hparams.get("runtime"), (Mapping, RuntimeConfig)) else None
        return prepare_model(cfg, state, device, precision, recorded, overrides, announce, str(path),
                             check=lambda model: check_shapes(path, weights, cfg, source, model))
    except (GenomeInputError, ConfigError):
        raise
    except Exception as exc:  # a torch file that is not a biomoe checkpoint, or a damaged one
        detail = " ".join(str(exc).split())
        detail = detail if len(detail) <= 200 else detail[:200] + "..."
        raise GenomeInputError(path, f"cannot load as a biomoe checkpoint ({type(exc).__name__}: {detail})") from None


def load_model(ckpt_path: str | os.PathLike[str], map_location: str = "cpu",
               expert_backend: str | None = None) -> MoETransformer:
    """The fp32 reference model of a checkpoint on the CPU, in eval mode (HF export, notebooks):
    :func:`load_for_inference` with torch kernels in fp32."""
    overrides = {"expert_backend": expert_backend} if expert_backend else None
    return load_for_inference(ckpt_path, map_location, "fp32", overrides, announce=lambda line: None).module
