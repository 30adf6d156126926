"""A plain-PyTorch MoE decoder for nucleotide sequences.

Pre-norm blocks (RMSNorm), causal self-attention with rotary embeddings and grouped-query
attention through ``F.scaled_dot_product_attention``, and a SwiGLU MLP that is either dense or a
mixture of experts. A row may hold several documents (``position_ids``, see
:mod:`biomoe.model.documents`): attention then stays inside each document. The model knows
nothing about Lightning, precision recipes or parallelism; those are applied from outside
(torchtitan style).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from biomoe.compat.torch import flash_lower_right
from biomoe.model.backends import TORCH_BACKENDS, LayerBackends
from biomoe.model.config import ModelConfig
from biomoe.model.documents import DocumentLayout, document_attention
from biomoe.model.moe import Experts, MoELayer
from biomoe.model.moe.experts import scaled_init_std
from biomoe.model.swiglu import split_projection, swiglu, swiglu_into_gate


@dataclass
class ModelOutput:
    logits: Tensor | None  # [batch, seq, vocab] (None when only hidden states were asked for)
    hidden: Tensor  # final normed hidden states [batch, seq, hidden]
    aux_loss: Tensor  # mean over MoE layers
    z_loss: Tensor  # mean over MoE layers


def _inverse_frequencies(head_dim: int, theta: float, device: torch.device) -> Tensor:
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))


def rotary_tables(seq_len: int, head_dim: int, theta: float, device: torch.device,
                  offset: int | Tensor = 0) -> tuple[Tensor, Tensor]:
    """cos/sin tables [seq, head_dim/2] in fp32 for positions ``offset .. offset + seq_len - 1``
    (computed per call: cheap, and no stale cache). ``offset`` is the number of tokens already in a
    :class:`KVCache`, so a token gets the same rotation whether it is fed alone or in a sequence;
    it may be a device int64 tensor (a :class:`StaticKVCache`'s position), read on the device
    without a host sync."""
    inv_freq = _inverse_frequencies(head_dim, theta, device)
    if isinstance(offset, Tensor):
        positions = (offset + torch.arange(seq_len, device=device)).to(torch.float32)
    else:
        positions = torch.arange(offset, offset + seq_len, device=device, dtype=torch.float32)
    angles = torch.outer(positions, inv_freq)
    return angles.cos(), angles.sin()


def rotary_tables_at(position_ids: Tensor, head_dim: int, theta: float) -> tuple[Tensor, Tensor]:
    """cos/sin tables [b, s, head_dim/2] in fp32 for each token's own position (packed rows: the
    position inside its document), the very angles :func:`rotary_tables` gives that position."""
    inv_freq = _inverse_frequencies(head_dim, theta, position_ids.device)
    angles = position_ids.to(torch.float32)[..., None] * inv_freq
    return angles.cos(), angles.sin()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (first half, second half) of each head, as Llama/Mixtral/HF do, in fp32; the
    result in ``x``'s dtype. x: [b, s, h, d] (the projection's own layout: contiguous, so every
    pass below runs at memory speed; transpose afterwards); cos/sin [s, d/2] (shared by the rows)
    or [b, s, d/2] (per token).

    Each half-head is one product and one fused multiply-add, both reading ``x`` straight from its
    dtype into fp32; without autograd the second writes the rounded result into place, with it a
    copy does. Casting whole heads to fp32 and back around four products, two sums and a
    concatenation (on transposed views) took a large share of a bf16 scoring forward's GPU time."""
    half = x.shape[-1] // 2
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)  # broadcast over heads
    x1, x2 = x[..., :half], x[..., half:]
    out = torch.empty_like(x)
    if torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad):
        out[..., :half] = torch.addcmul(torch.mul(x2, -sin), x1, cos)
        out[..., half:] = torch.addcmul(torch.mul(x1, sin), x2, cos)
        return out
    torch.addcmul(torch.mul(x2, -sin), x1, cos, out=out[..., :half])  # x1·cos − x2·sin
    torch.addcmul(torch.mul(x1, sin), x2, cos, out=out[..., half:])  # x2·cos + x1·sin
    return out


def expand_kv_heads(k: Tensor, v: Tensor, num_heads: int) -> tuple[Tensor, Tensor]:
    """Repeat grouped-query K/V heads ``[b, h_kv, s, d]`` up to ``num_heads`` for SDPA.

    Expanding KV keeps every SDPA backend available (``enable_gqa`` limits the choice)."""
    repeat = num_heads // k.shape[1]
    if repeat == 1:
        return k, v
    return k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)


def kv_buffers(cfg: ModelConfig, batch_size: int, max_length: int, device: torch.device | str | None,
               dtype: torch.dtype) -> tuple[list[Tensor], list[Tensor]]:
    """Zeroed key and value buffers ``[batch, kv_heads, max_length, head_dim]``, one per block."""
    shape = (batch_size, cfg.num_kv_heads, max_length, cfg.head_dim)
    return ([torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.num_layers)],
            [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.num_layers)])


class KVCache:
    """Keys and values of the tokens seen so far, one buffer per block, for incremental decoding.

    Without it every new token re-reads the whole sequence (quadratic in its length); with it a
    step computes attention for the new tokens only. Buffers are allocated once for
    ``max_length`` tokens. The model advances :attr:`length` after all blocks saw the new tokens.
    """

    def __init__(self, cfg: ModelConfig, batch_size: int, max_length: int,
                 device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> None:
        self.keys, self.values = kv_buffers(cfg, batch_size, max_length, device, dtype)
        self.max_length = max_length
        self.length = 0

    def update(self, layer_id: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the new tokens' ``k``/``v`` [b, kv_heads, s, d]; return all keys/values so far."""
        end = self.length + k.shape[2]
        if end > self.max_length:
            raise ValueError(f"KVCache holds {self.max_length} tokens; {end} were fed")
        self.keys[layer_id][:, :, self.length:end] = k
        self.values[layer_id][:, :, self.length:end] = v
        return self.keys[layer_id][:, :, :end], self.values[layer_id][:, :, :end]


class StaticKVCache:
    """A :class:`KVCache` of fixed shapes whose fill level lives on the device, for decoding that
    is captured once as a CUDA graph and replayed for every token.

    :attr:`position` (a 0-d int64 device tensor) counts the tokens held. Feeding tokens to a cache
    that holds some writes their keys/values at ``position ..`` with ``index_copy_`` and attends
    over the whole buffer under the mask ``slot <= query position``, with rotary angles computed
    from :attr:`position` on the device; the model then advances it in place. So a one-token step
    has the same shapes and kernels at every position and never reads a number back to the host.
    The caller counts the tokens on its side (the device cannot refuse an overflow cheaply): feeding
    more than ``max_length`` is an index error on the CPU and a device assert on CUDA.

    A feed into an empty cache (new, or after :meth:`reset`) is a prefill: the ordinary causal
    attention over the new tokens only, no mask over the buffer. :attr:`empty` is the host's record
    of that, set by :meth:`reset` and cleared by the model after any feed.
    """

    def __init__(self, cfg: ModelConfig, batch_size: int, max_length: int,
                 device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> None:
        self.keys, self.values = kv_buffers(cfg, batch_size, max_length, device, dtype)
        self.max_length = max_length
        self.position = torch.zeros((), dtype=torch.int64, device=device)
        self.empty = True
        self._slots = torch.arange(max_length, device=device)

    def reset(self) -> None:
        """Forget every token (on the device, in place: a captured graph keeps reading the same tensor)."""
        self.position.zero_()
        self.empty = True

    def prefill(self, layer_id: int, k: Tensor, v: Tensor) -> None:
        """Store the first tokens' ``k``/``v`` [b, kv_heads, s, d] of an empty cache."""
        s = k.shape[2]
        if s > self.max_length:
            raise ValueError(f"StaticKVCache holds {self.max_length} tokens; {s} were fed")
        self.keys[layer_id][:, :, :s] = k
        self.values[layer_id][:, :, :s] = v

    def update(self, layer_id: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the new tokens' ``k``/``v`` at :attr:`position`; return the whole buffers."""
        s = k.shape[2]
        index = self.position.view(1) if s == 1 else self.position + torch.arange(s, device=k.device)
        self.keys[layer_id].index_copy_(2, index, k)
        self.values[layer_id].index_copy_(2, index, v)
        return self.keys[layer_id], self.values[layer_id]

    def mask(self, s: int) -> Tensor:
        """[s, max_length] bool: new token i (at ``position + i``) sees the slots up to its own."""
        if s == 1:
            return (self._slots <= self.position)[None]
        return self._slots[None] <= (self.position + torch.arange(s, device=self._slots.device))[:, None]

    def advance(self, s: int) -> None:
        self.position.add_(s)
        self.empty = False


def _continued_attention(q: Tensor, k: Tensor, v: Tensor, past: int) -> Tensor:
    """Attention of ``s`` new queries after ``past`` cached tokens: query ``i`` sits at position
    ``past + i`` and sees keys ``0..past + i`` (causal, aligned to the lower right; SDPA's
    ``is_causal`` aligns top-left). ``k``/``v`` may hold fewer (grouped-query) heads than ``q``.
    On CUDA in bf16/fp16 the flash kernel does it with no mask and reads the grouped heads in place
    (:func:`biomoe.compat.torch.flash_lower_right`). Elsewhere the heads are repeated and, while the
    cache holds no more than the new tokens, the queries take the last rows of a square causal
    attention whose first ``past`` rows are zeros and are dropped (no mask in memory, at most a
    third more attention work); past a longer cache a boolean mask wastes less."""
    out = flash_lower_right(q, k, v)
    if out is not None:
        return out
    k, v = expand_kv_heads(k, v, q.shape[1])
    b, h, s, d = q.shape
    if past <= s:
        padded = torch.cat([q.new_zeros(b, h, past, d), q], dim=2)
        return F.scaled_dot_product_attention(padded, k, v, is_causal=True)[:, :, past:]
    mask = torch.ones(s, past + s, dtype=torch.bool, device=q.device).tril(diagonal=past)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, backends: LayerBackends = TORCH_BACKENDS) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.rope_theta = cfg.rope_theta
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=False)
        # Optional fused kernel (e.g. TE DotProductAttention): no parameters, so no state_dict keys.
        self.core_attention = (None if backends.core_attention is None
                               else backends.core_attention(self.num_heads, self.num_kv_heads, self.head_dim))

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache: KVCache | StaticKVCache | None = None,
                layer_id: int = 0, documents: DocumentLayout | None = None) -> Tensor:
        """``documents``: the rows hold several documents, and no token attends across a boundary
        (no cache: the model refuses that pairing)."""
        b, s, _ = x.shape
        q = apply_rotary(self.q_proj(x).view(b, s, self.num_heads, self.head_dim), cos, sin).transpose(1, 2)
        k = apply_rotary(self.k_proj(x).view(b, s, self.num_kv_heads, self.head_dim), cos, sin).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if isinstance(cache, StaticKVCache):
            return self.o_proj(self._static_attention(q, k, v, cache, layer_id))
        past = 0
        if cache is not None:
            past = cache.length
            k, v = cache.update(layer_id, k, v)
        elif self.core_attention is not None:  # fused kernels are for training; decoding uses SDPA
            return self.o_proj(self.core_attention(q, k, v, documents))
        elif documents is not None:
            return self.o_proj(document_attention(q, k, v, documents))
        if past and s > 1:
            out = _continued_attention(q, k, v, past)  # repeats the grouped heads only where it must
        else:
            k, v = expand_kv_heads(k, v, self.num_heads)
            # past == 0: causal from the top left; one new token sees everything cached: no mask
            out = F.scaled_dot_product_attention(q, k, v, is_causal=past == 0)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))

    def _static_attention(self, q: Tensor, k: Tensor, v: Tensor, cache: StaticKVCache, layer_id: int) -> Tensor:
        """Attention of the new tokens through a :class:`StaticKVCache` -> [b, s, heads·head_dim]."""
        b, _, s, d = q.shape
        if cache.empty:  # prefill: only the new tokens exist, plain causal attention
            cache.prefill(layer_id, k, v)
            k, v = expand_kv_heads(k, v, self.num_heads)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            keys, values = cache.update(layer_id, k, v)
            # The query heads of one KV head become rows of one query block (head j of the group,
            # token i -> row j·s + i), so the whole buffer is read as is instead of repeated per head.
            group = self.num_heads // self.num_kv_heads
            mask = cache.mask(s)
            if s > 1:
                mask = mask.repeat(group, 1)
            q = q.reshape(b, self.num_kv_heads, group * s, d)
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask).reshape(b, self.num_heads, s, d)
        return out.transpose(1, 2).reshape(b, s, -1)


class DenseMLP(nn.Module):
    """SwiGLU MLP for blocks that are not MoE (same gate-then-up convention as the experts)."""

    def __init__(self, hidden_size: int, ffn_hidden_size: int) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(hidden_size, 2 * ffn_hidden_size, bias=False)
        self.down_proj = nn.Linear(ffn_hidden_size, hidden_size, bias=False)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        weight = self.gate_up_proj.weight
        if split_projection(x, weight):
            gate, up = weight.chunk(2, dim=0)
            hidden = swiglu_into_gate(F.linear(x, gate), F.linear(x, up))
        else:
            hidden = swiglu(self.gate_up_proj(x))
        zero = x.new_zeros((), dtype=torch.float32)
        return self.down_proj(hidden), zero, zero


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int, backends: LayerBackends = TORCH_BACKENDS) -> None:
        super().__init__()
        self.layer_id = layer_id
        self.attn_norm = backends.norm(cfg.hidden_size, eps=cfg.norm_eps)
        self.attn = Attention(cfg, backends)
        self.mlp_norm = backends.norm(cfg.hidden_size, eps=cfg.norm_eps)
        self.is_moe = layer_id in cfg.moe_layer_ids
        if self.is_moe:
            out_std = scaled_init_std(cfg.init_std, cfg.num_layers)
            router = backends.router(cfg.hidden_size, cfg.num_experts, cfg.top_k, cfg.router_bias_update_rate)
            experts = Experts(cfg.num_experts, cfg.hidden_size, cfg.ffn_hidden_size,
                              backends.experts, cfg.init_std, out_std)
            self.mlp: nn.Module = MoELayer(router, experts, backends.dispatcher())
        else:
            self.mlp = DenseMLP(cfg.hidden_size, cfg.dense_ffn_size)
        # every token's own dense MLP beside its routed experts (model.config.shared_expert_size)
        self.shared_expert = DenseMLP(cfg.hidden_size, cfg.shared_expert_size) \
            if self.is_moe and cfg.shared_expert_size else None
        self.residual_dropout = nn.Dropout(cfg.dropout)  # identity when p = 0 or in eval mode

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache: KVCache | StaticKVCache | None = None,
                documents: DocumentLayout | None = None) -> tuple[Tensor, Tensor, Tensor]:
        x = x + self.residual_dropout(self.attn(self.attn_norm(x), cos, sin, cache, self.layer_id, documents))
        normed = self.mlp_norm(x)
        mlp_out, aux, z = self.mlp(normed)
        if self.shared_expert is not None:
            mlp_out = mlp_out + self.shared_expert(normed)[0]
        return x + self.residual_dropout(mlp_out), aux, z


class MoETransformer(nn.Module):
    """Embedding → blocks → RMSNorm → LM head. ``forward`` returns logits and router losses.

    ``backends`` picks the kernels of every layer (plain PyTorch by default); see
    :mod:`biomoe.model.backends`. To build a model ready for a device, precision and parallel
    layout, use :func:`biomoe.build.build_model`.
    """

    def __init__(self, cfg: ModelConfig, backends: LayerBackends = TORCH_BACKENDS) -> None:
        super().__init__()
        self.config = cfg
        self.backends = backends
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.blocks = nn.ModuleList(Block(cfg, i, backends) for i in range(cfg.num_layers))
        self.norm = backends.norm(cfg.hidden_size, eps=cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed.weight
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        std, out_std = self.config.init_std, scaled_init_std(self.config.init_std, self.config.num_layers)
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                is_output = name.endswith(("o_proj", "down_proj"))
                nn.init.normal_(module.weight, std=out_std if is_output else std)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=std)
            elif isinstance(module, nn.RMSNorm):
                nn.init.ones_(module.weight)
            elif isinstance(module, Experts):
                module.reset_parameters()

    def moe_layers(self) -> list[MoELayer]:
        return [b.mlp for b in self.blocks if isinstance(b.mlp, MoELayer)]

    def forward(self, input_ids: Tensor, return_logits: bool = True,
                cache: KVCache | StaticKVCache | None = None, position_ids: Tensor | None = None,
                documents: DocumentLayout | None = None) -> ModelOutput:
        """``cache`` (inference): ``input_ids`` continue the tokens already in it, which attend to
        those; the cache then holds them too.

        ``position_ids`` [batch, seq]: rows packed with several documents, each token's position
        inside its document (0 where one begins); attention stays inside each document and the
        rotary angles follow these positions. ``documents`` is the same given as a
        :class:`DocumentLayout` built ahead (by a caller that packed the rows on the host and knows
        the offsets, so the device is not waited for); give one or the other."""
        if position_ids is not None or documents is not None:
            documents = self._documents(input_ids, position_ids, documents, cache)
        x = self.embed(input_ids)
        static = isinstance(cache, StaticKVCache)
        if documents is not None:
            cos, sin = rotary_tables_at(documents.position_ids, self.config.head_dim, self.config.rope_theta)
        else:
            offset = 0 if cache is None else (cache.position if static else cache.length)
            cos, sin = rotary_tables(input_ids.shape[1], self.config.head_dim, self.config.rope_theta,
                                     input_ids.device, offset=offset)
        aux_total = x.new_zeros((), dtype=torch.float32)
        z_total = x.new_zeros((), dtype=torch.float32)
        for block in self.blocks:
            x, aux, z = block(x, cos, sin, cache, documents)
            aux_total = aux_total + aux
            z_total = z_total + z
        if static:
            cache.advance(input_ids.shape[1])
        elif cache is not None:
            cache.length += input_ids.shape[1]
        n_moe = max(len(self.config.moe_layer_ids), 1)
        hidden = self.norm(x)
        logits = self.lm_head(hidden) if return_logits else None
        return ModelOutput(logits, hidden, aux_total / n_moe, z_total / n_moe)

    @staticmethod
    def _documents(input_ids: Tensor, position_ids: Tensor | None, documents: DocumentLayout | None,
                   cache: KVCache | StaticKVCache | None) -> DocumentLayout:
        """The one layout of this forward (built once, shared by every block)."""
        if cache is not None:
            raise ValueError("position_ids (packed documents) cannot be combined with a KV cache: "
                             "decoding continues one sequence per row")
        if position_ids is not None and documents is not None:
            raise ValueError("give position_ids or documents, not both")
        layout = documents if documents is not None else DocumentLayout.of(position_ids.to(input_ids.device))
        if layout.position_ids.shape != input_ids.shape:
            raise ValueError(f"position_ids has shape {tuple(layout.position_ids.shape)}; input_ids has "
                             f"{tuple(input_ids.shape)}")
        return layout
