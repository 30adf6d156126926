"""Configuration dataclasses, and the range checks their fields declare.

One dataclass per concern, all reachable from LightningCLI YAML (jsonargparse reads the type
hints). Presets live in ``configs/*.yaml``, never as constants in code.

jsonargparse checks *types*; ranges are declared on the fields themselves
(``hidden_size: int = checked(256, integer(1))``) and checked in ``__post_init__``, so a value
out of range is one :class:`ConfigError` naming the key a user types
(``model.config.hidden_size: must be >= 1, got 0``) wherever the dataclass is built. The command
line runs the same checks on the parsed values before anything is built
(:mod:`biomoe.cli.run.config_checks` reads them with :func:`biomoe.checks.field_checks`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from biomoe.checks import boolean, check_fields, checked, choice, integer, optional, real, sequence_of
from biomoe.errors import ConfigError
from biomoe.model.moe.experts import known_backends
from biomoe.precisions import canonical_precision, precision_problem

__all__ = ["ConfigError", "ModelConfig", "OptimConfig", "RuntimeConfig", "check_expert_parallel"]

_POSITIVE = integer(1)
_FRACTION = real(0.0, 1.0)


OPTIM_BACKENDS: tuple[str, ...] = ("auto", "torch", "te", "compiled")
"""The master-weight AdamW implementations (``model.optim.backend``)."""


@dataclass
class ModelConfig:
    """Shape of the MoE decoder (litgpt-style: one dataclass describes the whole model).

    ``moe_layers`` lists the block indices whose MLP is a mixture of experts; ``None`` means every
    block. Dense blocks use a SwiGLU MLP of width ``dense_ffn_hidden_size`` (defaults to
    ``ffn_hidden_size * top_k`` so a dense block has the same active parameters as an MoE block).
    """

    key_prefix: ClassVar[str] = "model.config"

    vocab_size: int = checked(64, _POSITIVE)
    """Rows of the embedding table and LM head: at least the tokenizer's padded vocabulary (64)."""
    hidden_size: int = checked(256, _POSITIVE)
    """Width of the residual stream (the embedding size)."""
    num_layers: int = checked(4, _POSITIVE)
    """Number of transformer blocks."""
    num_heads: int = checked(8, _POSITIVE)
    """Attention (query) heads per block; must divide ``hidden_size``."""
    num_kv_heads: int = checked(4, _POSITIVE)
    """Key/value heads (grouped-query attention); must divide ``num_heads``."""
    num_experts: int = checked(8, _POSITIVE)
    """Experts in each MoE block."""
    top_k: int = checked(2, _POSITIVE)
    """Experts each token is routed to."""
    ffn_hidden_size: int = checked(512, _POSITIVE)
    """Hidden width of each expert's SwiGLU MLP."""
    dense_ffn_hidden_size: int | None = checked(None, integer(1, optional=True))
    """Hidden width of the MLP of dense (non-MoE) blocks; None = ``ffn_hidden_size * top_k``."""
    moe_layers: list[int] | None = checked(None, sequence_of(integer(0), optional=True))
    """Block indices whose MLP is a mixture of experts; None = every block, [] = a dense model."""
    norm_eps: float = checked(1e-5, real(0.0, 1.0, lo_open=True))
    """Epsilon of the RMSNorm layers."""
    rope_theta: float = checked(10000.0, real(0.0, lo_open=True))
    """Base of the rotary position embedding's frequencies (larger = slower rotation, longer range)."""
    aux_loss_coef: float = checked(0.01, real(0.0))
    """Weight of the router load-balancing loss (Switch/Mixtral style) in the training loss."""
    z_loss_coef: float = checked(0.001, real(0.0))
    """Weight of the router z-loss (keeps router logits small, ST-MoE) in the training loss."""
    router_bias_update_rate: float = checked(0.0, real(0.0))
    """> 0 enables auxiliary-loss-free balancing (DeepSeek-V3): a per-expert bias added to the
    routing scores for expert *selection only*, nudged by this rate after every optimizer step."""
    init_std: float = checked(0.02, real(0.0, lo_open=True))
    """Standard deviation of the normal weight initialisation (output projections are scaled down
    with depth)."""
    tie_embeddings: bool = checked(False, boolean())
    """Share one matrix between the token embedding and the LM head."""
    dropout: float = checked(0.0, real(0.0, 1.0, hi_open=True))
    """Residual dropout on each block's attention and MLP outputs (training only). A regulariser
    for small genomes, where a model sees every base many times and starts to memorise."""
    shared_expert_size: int = checked(0, integer(0))
    """Hidden width of a shared expert in every MoE block: a SwiGLU MLP every token passes through
    beside its routed experts (DeepSeekMoE, Qwen-MoE), for what all sequence has in common; 0 = none."""

    def __post_init__(self) -> None:
        self.validate()

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def moe_layer_ids(self) -> list[int]:
        """Sorted, without repeats: the model averages router losses over ``len()`` of this, so a
        block listed twice in ``moe_layers`` must not count twice."""
        return list(range(self.num_layers)) if self.moe_layers is None else sorted(set(self.moe_layers))

    @property
    def dense_ffn_size(self) -> int:
        return self.dense_ffn_hidden_size or self.ffn_hidden_size * self.top_k

    def validate(self) -> None:
        """Fail early with one actionable line instead of a shape error deep in a forward pass:
        each field's range, then the fields that must fit together."""
        check_fields(self)
        if self.top_k > self.num_experts:
            raise ConfigError(
                f"model.config.top_k={self.top_k} is larger than model.config.num_experts={self.num_experts}")
        if self.hidden_size % self.num_heads:
            raise ConfigError(f"model.config.hidden_size={self.hidden_size} is not divisible by "
                              f"model.config.num_heads={self.num_heads}")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(f"model.config.num_kv_heads={self.num_kv_heads} does not divide "
                              f"model.config.num_heads={self.num_heads}")
        if self.head_dim % 2:
            raise ConfigError(f"head dimension {self.head_dim} must be even for rotary embeddings")
        for layer in self.moe_layer_ids:
            if not 0 <= layer < self.num_layers:
                raise ConfigError(f"model.config.moe_layers contains {layer}, outside 0..{self.num_layers - 1}")

    def active_params_per_token(self) -> int:
        """Parameters touched per token (embedding lookup excluded, LM head included): the N in 6·N·tokens."""
        h, f = self.hidden_size, self.ffn_hidden_size
        kv = self.num_kv_heads * self.head_dim
        attn = h * h * 2 + h * kv * 2
        moe_ids = set(self.moe_layer_ids)
        total = 0
        for layer in range(self.num_layers):
            total += attn
            if layer in moe_ids:
                total += self.top_k * 3 * h * f + h * self.num_experts + 3 * h * self.shared_expert_size
            else:
                total += 3 * h * self.dense_ffn_size
        return total + h * self.vocab_size


def check_expert_parallel(num_experts: int, expert_parallel_size: int, world_size: int,
                          data_parallel_replicate_size: int = 1) -> None:
    """Raise a one-line ConfigError unless this EP layout can exist.

    Called before any process is launched (the CLI does it in ``before_fit``), so a wrong
    ``expert_parallel_size`` is one line, not a traceback from every rank's mesh set-up.
    EP ranks are carved out of the data-sharding ranks: EP must divide both the number of
    experts and ``world_size / data_parallel_replicate_size``.
    """
    ep, replicate = int(expert_parallel_size), int(data_parallel_replicate_size)
    if ep < 1 or replicate < 1:
        raise ConfigError(f"expert_parallel_size={ep} and data_parallel_replicate_size={replicate} "
                          "must be >= 1")
    if num_experts % ep:
        raise ConfigError(f"expert_parallel_size={ep} does not divide model.config.num_experts={num_experts}")
    if world_size % replicate:
        raise ConfigError(f"data_parallel_replicate_size={replicate} does not divide the world size "
                          f"{world_size} (devices x nodes)")
    if (world_size // replicate) % ep:
        raise ConfigError(f"expert_parallel_size={ep} does not divide the world size {world_size} "
                          f"(devices x nodes{f' / {replicate} replicas' if replicate > 1 else ''})")


@dataclass
class OptimConfig:
    """AdamW with decoupled weight decay groups and linear warm-up then cosine decay."""

    key_prefix: ClassVar[str] = "model.optim"

    lr: float = checked(1e-3, real(0.0))
    """Peak learning rate, reached at the end of the warm-up (0 leaves the weights as they are)."""
    min_lr_ratio: float = checked(0.1, _FRACTION)
    """Learning rate at the end of the cosine decay, as a fraction of ``lr``."""
    weight_decay: float = checked(0.1, real(0.0))
    """Decoupled weight decay of the weight matrices (1-D parameters such as norms, and the
    token embedding, get none)."""
    betas: tuple[float, float] = checked((0.9, 0.95), sequence_of(real(0.0, 1.0, hi_open=True), length=2))
    """AdamW's moment decay rates (beta1, beta2)."""
    eps: float = checked(1e-8, real(0.0, lo_open=True))
    """AdamW's epsilon (added to the root of the second moment)."""
    warmup_steps: int = checked(100, integer(0))
    """Optimizer steps of linear warm-up from 0 to ``lr``."""
    max_steps: int | None = checked(None, integer(1, optional=True))
    """Length of the cosine schedule; defaults to the trainer's estimated stepping batches."""
    fused: bool | None = checked(None, boolean(optional=True))
    """Fused AdamW kernel; None = on for CUDA, off otherwise."""
    master_weights: bool | None = checked(None, boolean(optional=True))
    """Keep fp32 master copies of the weights in the optimizer. None = whenever the parameters are
    stored in lower precision (``trainer.precision: bf16-true``): the model then computes with bf16
    weights, and the update is applied to fp32 copies, so small updates are not rounded away."""
    backend: str = checked("auto", choice(*OPTIM_BACKENDS))
    """Which AdamW applies the master-weight update: ``te`` = Transformer Engine's ``FusedAdam``
    (one kernel reads the bf16 gradient and writes the fp32 master, both moments and the bf16
    weight), ``compiled`` = the same update generated by ``torch.compile``, one kernel per
    parameter (faster than TE's on a large model, and as fast with ``master_storage: remainder``,
    where TE's kernel is slower; the first step compiles it; eager on a CPU), ``torch`` = biomoe's
    AdamW on torch's fused kernels (also the CPU path), ``auto`` = te when the parameters are on a
    CUDA device and Transformer Engine is installed (the compiled update is unmeasured on small
    networks). Figures: docs/benchmarks.md, "The compiled master-weight AdamW"."""
    moment_dtype: str = checked("fp32", choice("fp32", "bf16", "bf16-first"))
    """dtype of AdamW's two moments when master weights are kept: ``fp32``, ``bf16`` (both: half
    their memory and optimizer-step traffic) or ``bf16-first`` (the first moment in bf16, the
    second in fp32); the update is computed in fp32 either way."""
    master_storage: str = checked("fp32", choice("fp32", "remainder"))
    """How the fp32 master of each bf16 weight is kept: ``fp32`` = a full copy (4 bytes per
    parameter); ``remainder`` = only the 16 bits the bf16 weight lacks (2 bytes; weight and
    remainder are the fp32 master exactly, so training is unchanged but for how the weight rounds
    a tie). TE's remainder kernel saves memory but is slower than its full-copy kernel, so the full
    copy is the default; with ``backend: compiled`` the split is fused into the update and costs
    no time. On the torch path the split costs extra kernels per parameter. Figures:
    docs/benchmarks.md, "Master-weight storage"."""

    def __post_init__(self) -> None:
        check_fields(self)


BACKEND_CHOICES: tuple[str, ...] = ("auto", "torch", "te")
LAYER_BACKEND_FIELDS: tuple[str, ...] = ("norm_backend", "attention_backend", "router_backend",
                                         "dispatch_backend")
"""The RuntimeConfig fields that pick torch or TE for one layer component (``auto | torch | te``)."""


@dataclass
class RuntimeConfig:
    """How the model runs, as opposed to what it is (:class:`ModelConfig`).

    None of these change the parameters: a checkpoint trained with one runtime loads under any
    other, so validate/score/export may run a model differently from how it was trained.
    """

    key_prefix: ClassVar[str] = "model.runtime"

    precision: str = checked("bf16", precision_problem)
    """bf16 | fp8-delayed | fp8-current | fp8-block | mxfp8 | nvfp4: the Transformer Engine recipe
    entered around the forward. Checked against the GPU at start-up (MXFP8/NVFP4 need Blackwell)."""
    precision_fallback: str | None = checked(None, optional(precision_problem))
    """Precision to use (logged) if ``precision`` cannot run on this GPU; None = fail at start-up."""
    expert_backend: str = "auto"
    """loop | grouped | te | te_fused | auto: how the experts compute (te* need Transformer Engine
    and a GPU; auto = the fastest measured choice for the device and precision). Any name in the
    expert-backend registry (:data:`biomoe.model.moe.experts.EXPERT_BACKENDS`) is accepted."""
    attention_backend: str = "auto"
    """auto | torch | te (TE DotProductAttention); auto = TE where usable, torch under ``compile`` in bf16."""
    norm_backend: str = "auto"
    """auto | torch | te (TE RMSNorm); auto = TE where usable, torch under ``compile`` in bf16."""
    router_backend: str = "auto"
    """auto | torch | te (TE fused top-k router and aux loss); auto = TE where usable, torch under
    ``compile`` in bf16."""
    dispatch_backend: str = "auto"
    """auto | torch | te (TE moe_permute/unpermute); auto = TE where usable, torch under ``compile`` in bf16."""
    compile: bool = checked(False, boolean())
    """Run each block through ``torch.compile``: fuses the memory-bound work around the GEMMs
    (norms, rotary, SwiGLU, routing) at the price of compile time in the first steps. Transformer
    Engine calls stay eager (the compiler breaks its graph around them), so in bf16 the ``auto``
    layer kernels are torch's when this is on (:func:`biomoe.backends.select.auto_layers_take_te`).
    Worth it for wide models, whose step is bound by the GPU's memory traffic; small ones whose step
    is bound by the host get slower.
    Figures: docs/benchmarks.md, "model.runtime.compile"."""
    compile_mode: str = checked("default", choice("default", "reduce-overhead", "max-autotune",
                                                  "max-autotune-no-cudagraphs"))
    """torch.compile's mode for ``compile``: reduce-overhead replays each compiled block as a CUDA
    graph (fewer kernel launches for steps bound by the host; the blocks' kernels must all be
    traceable, so with TE layer kernels the graphs split around them)."""
    activation_checkpointing: bool = checked(False, boolean())
    """Recompute each block in backward: long contexts (hundreds of kilobases on one GPU) for about
    a third more compute."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        check_fields(self)  # the precision names are known (one line naming the key otherwise) ...
        # ... and stored canonical: what select_backends and the TE recipes read as they are
        self.precision = canonical_precision(self.precision)
        if self.precision_fallback is not None:
            self.precision_fallback = canonical_precision(self.precision_fallback)
        for name in LAYER_BACKEND_FIELDS:
            if getattr(self, name) not in BACKEND_CHOICES:
                raise ConfigError(f"model.runtime.{name}: {getattr(self, name)!r} is not one of "
                                  f"{', '.join(BACKEND_CHOICES)}")
        if self.expert_backend not in known_backends():
            raise ConfigError(f"model.runtime.expert_backend: {self.expert_backend!r} is unknown; "
                              f"choose one of {', '.join(known_backends())}")
