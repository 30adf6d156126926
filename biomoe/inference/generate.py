"""Sampling DNA from a trained model, one base at a time (what ``biomoe generate`` runs).

Sampling reads the model's next-base distribution one base at a time. A KV cache keeps the keys
and values of everything already read, so each new base costs one token's forward pass and a
sample of ``L`` bases costs time linear in ``L`` (without it, quadratic).

Only A, C, G and T are emitted (N too with ``allow_n``): the model's vocabulary also holds
special tokens and IUPAC ambiguity codes, which are never valid output. ``temperature`` scales the
logits (0 = always the most likely base), ``top_k`` keeps the k most likely bases and ``top_p``
the smallest set whose probability reaches p (nucleus sampling), applied in that order.

The model was trained on windows of ``context`` tokens that start with ``<bos>``. When a sample
outgrows that context, generation continues from a fresh cache that holds ``<bos>`` and the last
half-context bases, exactly as a training window would start, instead of feeding the model
positions it has never seen. The cost stays linear (one refill per half context).

Every sample draws its randomness from its own stream seeded by ``(seed, sample number)``, so a
sample does not change when ``batch_size`` or ``num_samples`` does.

How a step runs (``decode``):

* On a GPU (``auto``), one decoding step is a few dozen small kernels for a whole batch, so
  launching them from Python, not the arithmetic, sets the speed. The step therefore has fixed
  shapes: a :class:`~biomoe.model.transformer.StaticKVCache` whose position lives on the device,
  the token, logits and random numbers in fixed buffers, and the sampled base written by the step
  itself. It is captured once as a CUDA graph and replayed for every base, with no host sync
  between bases. A refill is an eager prefill into the same buffers, after which the same graph
  replays on. A model with a part not known to be graph-safe (:func:`decode_graph_supported`)
  runs the same step eagerly, said once as a warning; ``static`` always runs it eagerly.
* On a CPU (``auto``, or ``dynamic`` anywhere), the growing :class:`~biomoe.model.transformer.KVCache`
  attends over the filled part only: the reference path, whose samples for a seed stay fixed.

The step swaps in graph-safe kernels on the same weights (:func:`decode_kernels`). Prefills run
the model as it was built.
"""

from __future__ import annotations

import contextlib
import math
import re
import types
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from biomoe.backends.te.dispatch import TEPermuteDispatcher
from biomoe.data.tokenizer import A_ID, BOS_ID, C_ID, G_ID, N_ID, T_ID
from biomoe.inference.load import InferenceModel
from biomoe.model.moe import Experts, LocalDispatcher, MoELayer, TopKRouter
from biomoe.model.moe.experts import ExpertBackend, build_backend, grouped_mm_supported, swiglu
from biomoe.model.transformer import Attention, Block, DenseMLP, KVCache, MoETransformer, StaticKVCache

__all__ = ["DECODE_MODES", "SamplingSettings", "StaticDecoder", "decode_graph_supported", "decode_kernels",
           "default_batch_size", "emitted_token_ids", "generate", "parse_region", "sample_next"]

_NOISE_BLOCK = 1024  # uniforms drawn per sample at a time (one host->device copy per block)

DECODE_MODES = ("auto", "static", "dynamic")
"""``auto``: a CUDA graph of the static-cache step on a GPU (eager where the model is not
graph-safe), the dynamic cache on a CPU; ``static``: the static-cache step, eager; ``dynamic``:
the growing :class:`KVCache`, eager."""


def default_batch_size(device: torch.device | str) -> int:
    """Samples decoded together: 64 on a GPU (a step costs about the same for 1 or 64 samples),
    16 on a CPU."""
    return 64 if torch.device(device).type == "cuda" else 16


@dataclass(frozen=True)
class SamplingSettings:
    """How the next base is drawn from the model's distribution."""

    temperature: float = 1.0
    """Divides the logits: < 1 sharpens, > 1 flattens; 0 = greedy (always the most likely base)."""
    top_k: int | None = None
    """Keep only the k most likely bases (None = all)."""
    top_p: float | None = None
    """Keep the smallest set of bases whose probability reaches p (None = all)."""
    allow_n: bool = False
    """Let the model emit N (unknown base) besides A/C/G/T."""

    def __post_init__(self) -> None:
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


def emitted_token_ids(allow_n: bool = False) -> list[int]:
    """The token ids generation may produce: A, C, G, T (and N)."""
    return [A_ID, C_ID, G_ID, T_ID] + ([N_ID] if allow_n else [])


def sample_next(logits: Tensor, settings: SamplingSettings, uniforms: Tensor) -> Tensor:
    """Token ids [b] drawn from ``logits`` [b, vocab] under ``settings``.

    Sampling is by inverse CDF on ``uniforms`` [b] (in [0, 1)) rather than ``torch.multinomial``,
    so the random numbers come from per-sample streams the caller controls. Every operation is on
    the device with fixed shapes (no host sync), so it runs inside a captured CUDA graph too.
    """
    first, last = A_ID, (N_ID if settings.allow_n else T_ID)  # the emitted ids are one contiguous range
    scores = logits[:, first:last + 1].double()
    if settings.temperature == 0:
        return first + scores.argmax(-1)
    scores = scores / settings.temperature
    if settings.top_k is not None and settings.top_k < scores.shape[-1]:
        kth = scores.topk(settings.top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    probs = scores.softmax(-1)
    if settings.top_p is not None and settings.top_p < 1:
        sorted_probs, order = probs.sort(-1, descending=True)
        mass_before = sorted_probs.cumsum(-1) - sorted_probs  # the most likely base is always kept
        drop = torch.zeros_like(order, dtype=torch.bool).scatter(-1, order, mass_before >= settings.top_p)
        probs = probs.masked_fill(drop, 0.0)
    cdf = probs.cumsum(-1)
    threshold = uniforms.to(device=cdf.device, dtype=cdf.dtype)[:, None] * cdf[:, -1:]
    # Token j is chosen when cdf[j-1] <= threshold < cdf[j]: never a token of probability zero.
    choice = (cdf <= threshold).sum(-1).clamp_(max=probs.shape[-1] - 1)
    return first + choice


class _SampleNoise:
    """Uniform random numbers, one independent stream per sample (numpy's SeedSequence)."""

    def __init__(self, seed: int, sample_ids: range, device: torch.device) -> None:
        self._rngs = [np.random.default_rng([seed, i]) for i in sample_ids]
        self._device = device
        self._block: Tensor | None = None
        self._used = _NOISE_BLOCK

    def block(self) -> np.ndarray:
        """The next ``_NOISE_BLOCK`` uniforms of every stream, [_NOISE_BLOCK, samples]."""
        return np.stack([rng.random(_NOISE_BLOCK) for rng in self._rngs], axis=1)

    def next(self) -> Tensor:
        if self._used == _NOISE_BLOCK:
            self._block = torch.from_numpy(self.block()).to(self._device)
            self._used = 0
        assert self._block is not None
        self._used += 1
        return self._block[self._used - 1]


# ------------------------------------------------------------------------ graph-safe decode kernels
class AllExpertsBackend(ExpertBackend):
    """Every row through every expert, each row keeping its own expert's output.

    The decode step's expert backend where ``torch._grouped_mm`` cannot run (GPUs before Hopper,
    fp32 weights, unaligned sizes), since the per-expert loop reads its counts on the host. It
    costs E times the arithmetic of routed experts, but a decode step has only batch × top_k rows
    and reads every expert's weights anyway once the batch is large, so the step stays bound by
    reading weights. Never used for a prefill (thousands of rows)."""

    name = "all_experts"

    def __call__(self, rows, tokens_per_expert, gate_up, down, probs=None):
        positions = torch.arange(rows.shape[0], device=rows.device)
        # rows are grouped by expert: row r belongs to expert e when ends[e-1] <= r < ends[e]
        expert_of_row = torch.bucketize(positions, tokens_per_expert.cumsum(0), right=True)
        hidden = swiglu(torch.matmul(rows, gate_up.transpose(-2, -1)))  # [E, rows, F]
        out = torch.matmul(hidden, down.transpose(-2, -1))  # [E, rows, H]
        return out[expert_of_row, positions]


def _decode_expert_backend(experts: Experts, choice: str = "auto") -> ExpertBackend | None:
    """The graph-safe backend for ``experts`` in a decode step; None = keep its own."""
    param = experts.gate_up_proj
    rows = torch.empty(0, experts.hidden_size, device=param.device, dtype=param.dtype)
    grouped_ok = grouped_mm_supported(rows, experts.gate_up_proj, experts.down_proj)
    if choice == "all_experts" or (choice == "auto" and not grouped_ok):
        return AllExpertsBackend()
    if experts.backend_name == "grouped":
        return None
    return build_backend("grouped")


_UNSET = object()


@contextlib.contextmanager
def decode_kernels(module: MoETransformer, experts: str = "auto") -> Iterator[None]:
    """Run the decode step on graph-safe torch kernels, on the same parameters, then restore.

    * Norms: ``nn.RMSNorm.forward``. A TE norm (``TERMSNorm``) is an ``nn.RMSNorm`` whose CUDA
      forward calls TE's kernel through its Python dispatch, which is not known to capture
      cleanly in a CUDA graph; the torch op computes the same function of the same weight.
    * Routers: ``TopKRouter.forward`` (TE's fused router is a subclass with the same parameters).
    * Dispatch: :class:`LocalDispatcher` (argsort on the device) instead of TE's permutation.
    * Experts: ``grouped`` (``torch._grouped_mm``, group offsets on the device) where it runs,
      else :class:`AllExpertsBackend` (``experts="grouped"`` / ``"all_experts"`` choose). TE's
      grouped GEMMs take their split sizes on the host, and ``loop`` reads them with ``.tolist()``.
      Under an FP8 recipe the step's experts therefore compute in bf16 (prefills keep the recipe).

    Attention needs nothing: a cached step is always torch SDPA. Inside, nothing may be prefilled
    through the all-experts backend (E times the work of a routed prefill)."""
    undo: list = []

    def swap(obj: object, name: str, value: object) -> None:
        undo.append((obj, name, obj.__dict__.get(name, _UNSET)))
        obj.__dict__[name] = value

    try:
        for sub in module.modules():
            if isinstance(sub, nn.RMSNorm) and type(sub).forward is not nn.RMSNorm.forward:
                swap(sub, "forward", types.MethodType(nn.RMSNorm.forward, sub))
            elif isinstance(sub, TopKRouter) and type(sub).forward is not TopKRouter.forward:
                swap(sub, "forward", types.MethodType(TopKRouter.forward, sub))
            elif isinstance(sub, MoELayer) and isinstance(sub.dispatcher, TEPermuteDispatcher):
                swap(sub, "dispatcher", LocalDispatcher())
            elif isinstance(sub, Experts):
                backend = _decode_expert_backend(sub, experts)
                if backend is not None:
                    swap(sub, "backend", backend)
        yield
    finally:
        for obj, name, old in reversed(undo):
            if old is _UNSET:
                del obj.__dict__[name]
            else:
                obj.__dict__[name] = old


_EXACT_TYPES = (Block, Attention, DenseMLP, MoELayer, Experts, nn.ModuleList, nn.Linear, nn.Embedding, nn.Dropout)


def decode_graph_supported(model: InferenceModel | MoETransformer) -> tuple[bool, str]:
    """(True, why) when the decode step under :func:`decode_kernels` is made only of parts known
    to capture in a CUDA graph; (False, the first part that is not) otherwise.

    Known: the model's own layers, torch norms and routers (TE's, replaced in the step), the local
    dispatcher (TE's permutation, replaced), SDPA, and the decode expert backends. Not: a CPU, an
    expert-parallel dispatcher or router statistics reduced over ranks (both talk to other
    processes), experts sharded as DTensors, any other module type."""
    module = InferenceModel.wrap(model).module
    device = next(module.parameters()).device
    if device.type != "cuda":
        return False, f"CUDA graphs need a CUDA device, the model is on {device}"
    for name, sub in module.named_modules():
        where = name or "the model"
        if sub.training:
            return False, f"{where} is in training mode (dropout)"
        if isinstance(sub, MoELayer):
            if not isinstance(sub.dispatcher, (LocalDispatcher, TEPermuteDispatcher)):
                return False, f"{where}: dispatcher {type(sub.dispatcher).__name__} is not single-device"
            if hasattr(sub.experts.gate_up_proj, "to_local"):
                return False, f"{where}: experts are sharded over ranks"
        if isinstance(sub, TopKRouter):
            if sub.stats_reducer is not None:
                return False, f"{where}: router statistics are reduced over ranks"
        elif isinstance(sub, (nn.RMSNorm, MoETransformer)) or type(sub) in _EXACT_TYPES:
            pass
        else:
            return False, f"{where} ({type(sub).__module__}.{type(sub).__qualname__}) is not known to be graph-safe"
    return True, "torch kernels, static KV cache"


# -------------------------------------------------------------------------------------- generation
@torch.inference_mode()
def generate(model: InferenceModel | MoETransformer, prompt: np.ndarray | None, length: int, num_samples: int = 1,
             settings: SamplingSettings = SamplingSettings(), seed: int = 0, batch_size: int | None = None,
             context: int | None = None, progress=None, decode: str = "auto") -> list[np.ndarray]:
    """``num_samples`` continuations of ``prompt`` (token ids; None or empty = from ``<bos>`` alone),
    ``length`` bases each, as token-id arrays.

    ``model`` is an :class:`~biomoe.inference.load.InferenceModel` or a bare module (run as it
    stands). ``batch_size``: samples decoded together (None: :func:`default_batch_size`).
    ``context`` caps the tokens the model attends to (``<bos>`` included); None = no cap.
    ``progress`` (a tqdm-like object) is advanced by one per generated base. ``decode``: one of
    :data:`DECODE_MODES` (see the module docstring).
    """
    if length < 1 or num_samples < 1 or (batch_size is not None and batch_size < 1):
        raise ValueError("length, num_samples and batch_size must be >= 1")
    if context is not None and context < 2:
        raise ValueError(f"context must be >= 2 tokens (<bos> and a base), got {context}")
    if decode not in DECODE_MODES:
        raise ValueError(f"decode must be one of {', '.join(DECODE_MODES)}, got {decode!r}")
    model = InferenceModel.wrap(model)
    batch_size = batch_size or default_batch_size(model.device)
    prompt_ids = np.zeros(0, dtype=np.int64) if prompt is None else np.asarray(prompt, dtype=np.int64)
    max_tokens = 1 + len(prompt_ids) + length  # <bos>, prompt, generated bases: all a sample can feed
    max_tokens = max_tokens if context is None else min(context, max_tokens)
    use_graph = False
    if decode == "auto" and model.device.type == "cuda":
        use_graph, reason = decode_graph_supported(model)
        if not use_graph:
            warnings.warn(f"generate: decoding eagerly, without a CUDA graph: {reason}", stacklevel=2)
    static = decode == "static" or (decode == "auto" and model.device.type == "cuda")
    samples: list[np.ndarray] = []
    decoder: StaticDecoder | None = None
    for first in range(0, num_samples, batch_size):
        rows = range(first, min(first + batch_size, num_samples))
        if not static:
            samples.extend(_generate_batch(model, prompt_ids, length, rows, settings, seed, max_tokens, progress))
            continue
        if decoder is None or decoder.batch_size != len(rows):
            decoder = None  # one set of buffers at a time: the last batch may be smaller
            decoder = StaticDecoder(model, len(rows), length, max_tokens, settings, use_graph)
        samples.extend(decoder.run(prompt_ids, _SampleNoise(seed, rows, model.device), progress))
    return samples


def _generate_batch(model: InferenceModel, prompt: np.ndarray, length: int, rows: range,
                    settings: SamplingSettings, seed: int, max_tokens: int, progress) -> list[np.ndarray]:
    """One batch through the growing :class:`KVCache` (the CPU reference path); ``max_tokens`` is
    the most a sample's cache holds (:func:`generate`'s, the context cap included)."""
    device, dtype = model.device, model.dtype
    b = len(rows)
    keep = max(1, (max_tokens - 1) // 2)  # bases carried into a refilled cache
    history = torch.from_numpy(prompt).to(device).expand(b, -1)  # prompt + generated so far
    generated = torch.empty(b, length, dtype=torch.long, device=device)
    cache = KVCache(model.config, b, max_tokens, device=device, dtype=dtype)
    noise = _SampleNoise(seed, rows, device)

    def refill(tail: Tensor) -> Tensor:
        """Start a fresh cache from <bos> + ``tail`` and return the next-token logits."""
        cache.length = 0
        tokens = torch.cat([torch.full((b, 1), BOS_ID, device=device, dtype=torch.long), tail], dim=1)
        return model(tokens, cache=cache).logits[:, -1]

    logits = refill(history[:, len(prompt) - min(len(prompt), max_tokens - 1):])
    for t in range(length):
        token = sample_next(logits.float(), settings, noise.next())
        generated[:, t] = token
        if progress is not None:
            progress.update(b)
        if t == length - 1:
            break
        if cache.length < max_tokens:
            logits = model(token[:, None], cache=cache).logits[:, -1]
        else:
            so_far = torch.cat([history, generated[:, :t + 1]], dim=1)
            logits = refill(so_far[:, -keep:])
    return list(generated.cpu().numpy())


class StaticDecoder:
    """Decoding of ``batch_size`` samples in fixed buffers: one step = the model's one-token
    forward through a :class:`StaticKVCache` + :func:`sample_next`, the sampled base written
    into :attr:`out` by the step itself.

    The step reads and writes only device tensors of fixed shapes: :attr:`token` (its input, the
    last base), the cache, :attr:`logits` (the step's next-token logits, fp32), the uniforms
    :attr:`noise` [block, b] at :attr:`noise_index`, and :attr:`out` [b, length] at
    :attr:`out_index`. With ``use_graph`` it is captured as a CUDA graph at its first call and
    replayed from then on; otherwise (and on a CPU) it runs eagerly. The host keeps its own count
    of the tokens in the cache and of the uniforms used, so it never reads the device to decide
    when to refill the cache or the noise block. One decoder serves any number of batches of its
    size (the graph and buffers are reused)."""

    @torch.inference_mode()
    def __init__(self, model: InferenceModel | MoETransformer, batch_size: int, length: int, max_tokens: int,
                 settings: SamplingSettings = SamplingSettings(), use_graph: bool = False) -> None:
        self.model = model = InferenceModel.wrap(model)
        self.module = model.module
        self.batch_size, self.length, self.max_tokens, self.settings = batch_size, length, max_tokens, settings
        device = self.device = model.device
        capacity = -(-max_tokens // 16) * 16  # slots past max_tokens stay masked; aligned rows suit SDPA's kernels
        self.cache = StaticKVCache(model.config, batch_size, capacity, device=device, dtype=model.dtype)
        self.token = torch.full((batch_size, 1), BOS_ID, dtype=torch.long, device=device)
        self.logits = torch.zeros(batch_size, model.config.vocab_size, dtype=torch.float32, device=device)
        self.noise = torch.zeros(_NOISE_BLOCK, batch_size, dtype=torch.float64, device=device)
        self.noise_index = torch.zeros(1, dtype=torch.long, device=device)
        self.out = torch.zeros(batch_size, length, dtype=torch.long, device=device)
        self.out_index = torch.zeros(1, dtype=torch.long, device=device)
        self.use_graph = use_graph and device.type == "cuda"
        self.graph: torch.cuda.CUDAGraph | None = None
        self.filled = 0  # tokens in the cache, counted on the host
        self._noise_used = _NOISE_BLOCK
        self._source: _SampleNoise | None = None

    @property
    def graphed(self) -> bool:
        """Whether steps replay a captured CUDA graph."""
        return self.graph is not None

    # the step, eager or captured -------------------------------------------------------------
    def _sample(self) -> None:
        uniforms = self.noise.index_select(0, self.noise_index)[0]
        token = sample_next(self.logits, self.settings, uniforms)[:, None]
        self.token.copy_(token)
        self.out.index_copy_(1, self.out_index, token)
        self.noise_index.add_(1)
        self.out_index.add_(1)

    def _decode(self) -> None:
        self.logits.copy_(self.module(self.token, cache=self.cache).logits[:, -1])
        self._sample()

    def _capture(self) -> None:
        """Capture :meth:`_decode` as in PyTorch's CUDA-graph recipe: warm-up on a side stream,
        then one capture. Warm-up steps really run, so the small state they advance is put back
        (the cache slot and ``out`` column they wrote are written again by the first replay);
        capture runs nothing. A failed capture leaves eager steps, said once."""
        state = (self.cache.position, self.token, self.noise_index, self.out_index)
        saved = [t.clone() for t in state]

        def restore() -> None:
            for t, s in zip(state, saved):
                t.copy_(s)

        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        try:
            with torch.cuda.stream(stream), decode_kernels(self.module):
                for _ in range(2):
                    self._decode()
                    restore()
            torch.cuda.current_stream(self.device).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with decode_kernels(self.module), torch.cuda.graph(graph):
                self._decode()
        except Exception as exc:  # a kernel that refuses capture: eager steps compute the same
            torch.cuda.synchronize(self.device)
            restore()
            self.use_graph = False
            warnings.warn(f"generate: CUDA graph capture failed, decoding eagerly "
                          f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})", stacklevel=3)
            return
        self.graph = graph

    @torch.inference_mode()
    def step(self) -> None:
        """Feed :attr:`token`, sample the next base into :attr:`token` and :attr:`out`."""
        self._take_noise()
        if self.use_graph and self.graph is None:
            self._capture()
        if self.graph is not None:
            self.graph.replay()
        else:
            with self.model.running(), decode_kernels(self.module):
                self._decode()
        self.filled += 1

    # host-side driving -------------------------------------------------------------------------
    def _take_noise(self) -> None:
        """Count one uniform per sample; at the end of a block, copy the next into :attr:`noise`."""
        if self._noise_used == _NOISE_BLOCK:
            assert self._source is not None
            block = torch.from_numpy(self._source.block())
            if self.device.type == "cuda":  # pinned + non_blocking: the host does not wait for the copy
                self.noise.copy_(block.pin_memory(), non_blocking=True)
            else:
                self.noise.copy_(block)
            self.noise_index.zero_()
            self._noise_used = 0
        self._noise_used += 1

    @torch.inference_mode()
    def refill(self, tail: Tensor) -> None:
        """Empty the cache, prefill ``<bos>`` + ``tail`` [b, n] (eagerly, the model's own kernels),
        and sample the next base from the prefill's logits."""
        self._take_noise()
        self.cache.reset()
        bos = torch.full((self.batch_size, 1), BOS_ID, device=self.device, dtype=torch.long)
        tokens = torch.cat([bos, tail], dim=1)
        with self.model.running():
            self.logits.copy_(self.module(tokens, cache=self.cache).logits[:, -1])
            self._sample()
        self.filled = tokens.shape[1]

    @torch.inference_mode()
    def start(self, noise: _SampleNoise) -> None:
        """Begin a new batch: its noise streams, :attr:`out` from column 0."""
        self._source = noise
        self._noise_used = _NOISE_BLOCK
        self.out_index.zero_()

    @torch.inference_mode()
    def run(self, prompt: np.ndarray, noise: _SampleNoise, progress=None) -> list[np.ndarray]:
        """``length`` bases for each sample of one batch, continuing ``prompt`` (token ids)."""
        b, max_tokens = self.batch_size, self.max_tokens
        keep = max(1, (max_tokens - 1) // 2)  # bases carried into a refilled cache
        history = torch.from_numpy(prompt).to(self.device).expand(b, -1)
        self.start(noise)
        self.refill(history[:, len(prompt) - min(len(prompt), max_tokens - 1):])
        for t in range(self.length):  # base t has just been sampled into out[:, t]
            if progress is not None:
                progress.update(b)
            if t == self.length - 1:
                break
            if self.filled < max_tokens:
                self.step()
            else:
                so_far = torch.cat([history, self.out[:, :t + 1]], dim=1)
                self.refill(so_far[:, -keep:])
        return list(self.out.to("cpu", copy=True).numpy())  # copy: the buffer serves the next batch


# ---------------------------------------------------------------------------------------- regions
_REGION = re.compile(r"^(?P<contig>.+?)(?::(?P<start>[\d,]+)-(?P<end>[\d,]+))?$")


def parse_region(text: str) -> tuple[str, int | None, int | None]:
    """``contig:start-end`` (1-based, inclusive, as samtools writes regions; commas allowed) ->
    (contig, 0-based start, end); a bare ``contig`` means all of it (None, None)."""
    match = _REGION.match(text.strip())
    if match is None or not match.group("contig"):
        raise ValueError(f"region {text!r} is not contig:start-end")
    if match.group("start") is None:
        return match.group("contig"), None, None
    start, end = (int(match.group(key).replace(",", "")) for key in ("start", "end"))
    if start < 1 or end < start:
        raise ValueError(f"region {text!r}: start must be >= 1 and end >= start (1-based, inclusive)")
    return match.group("contig"), start - 1, end
