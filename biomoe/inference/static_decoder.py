"""Decoding in fixed buffers: the step a CUDA graph captures once and replays for every base.

The step has fixed shapes: a :class:`~biomoe.model.transformer.StaticKVCache` whose position
lives on the device, the token, logits and random numbers in fixed buffers, and the sampled base
written by the step itself, so no host sync happens between bases. A refill (a sample outgrowing
the context) is an eager prefill into the same buffers, after which the same graph replays on.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import Tensor

from biomoe.data.tokenizer import BOS_ID
from biomoe.inference.decode_kernels import decode_kernels
from biomoe.inference.load import InferenceModel
from biomoe.inference.sampling import DEFAULT_SAMPLING, NOISE_BLOCK, SampleNoise, SamplingSettings, sample_next
from biomoe.model.transformer import MoETransformer, StaticKVCache

__all__ = ["StaticDecoder"]


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
                 settings: SamplingSettings = DEFAULT_SAMPLING, use_graph: bool = False) -> None:
        self.model = model = InferenceModel.wrap(model)
        self.module = model.module
        self.batch_size, self.length, self.max_tokens, self.settings = batch_size, length, max_tokens, settings
        device = self.device = model.device
        capacity = -(-max_tokens // 16) * 16  # slots past max_tokens stay masked; aligned rows suit SDPA's kernels
        self.cache = StaticKVCache(model.config, batch_size, capacity, device=device, dtype=model.dtype)
        self.token = torch.full((batch_size, 1), BOS_ID, dtype=torch.long, device=device)
        self.logits = torch.zeros(batch_size, model.config.vocab_size, dtype=torch.float32, device=device)
        self.noise = torch.zeros(NOISE_BLOCK, batch_size, dtype=torch.float64, device=device)
        self.noise_index = torch.zeros(1, dtype=torch.long, device=device)
        self.out = torch.zeros(batch_size, length, dtype=torch.long, device=device)
        self.out_index = torch.zeros(1, dtype=torch.long, device=device)
        self.use_graph = use_graph and device.type == "cuda"
        self.graph: torch.cuda.CUDAGraph | None = None
        self.filled = 0  # tokens in the cache, counted on the host
        self._noise_used = NOISE_BLOCK
        self._source: SampleNoise | None = None

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
        if self._noise_used == NOISE_BLOCK:
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
    def start(self, noise: SampleNoise) -> None:
        """Begin a new batch: its noise streams, :attr:`out` from column 0."""
        self._source = noise
        self._noise_used = NOISE_BLOCK
        self.out_index.zero_()

    @torch.inference_mode()
    def run(self, prompt: np.ndarray, noise: SampleNoise, progress=None) -> list[np.ndarray]:
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
