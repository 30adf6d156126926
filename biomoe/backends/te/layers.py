"""TE RMSNorm and DotProductAttention on GPU, with the torch path's state_dict keys.

- Norms: :class:`TERMSNorm` is an ``nn.RMSNorm`` (same ``weight`` parameter) that the model is
  built with. On CUDA its forward runs a ``te.RMSNorm`` that shares that very Parameter object,
  kept outside the module tree so no TE ``_extra_state`` key appears; on CPU it is the torch op.
- Attention: :class:`TECoreAttention` becomes ``Attention.core_attention`` and replaces
  only the SDPA call (causal, GQA natively via ``num_gqa_groups``). It has no parameters. RoPE is
  still applied by :func:`biomoe.model.transformer.apply_rotary` before it, so the math matches the torch path.
  Inputs that are not bf16/fp16 (no autocast) or not on CUDA fall back to SDPA. Rows packed with
  several documents run in TE's THD format (tokens of all rows end to end, ``cu_seqlens``
  offsets, ``padding_causal`` mask), so attention stays inside each document.

Both TE calls run outside ``torch.compile``'s graphs (``eager_when_compiled``): dynamo cannot
trace TE's Python-side dispatch, so compiled blocks are split around them instead of failing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from biomoe.compat.torch import eager_when_compiled
from biomoe.model.documents import DocumentLayout, masked_document_attention
from biomoe.model.transformer import expand_kv_heads


class TERMSNorm(nn.RMSNorm):
    """``nn.RMSNorm`` whose CUDA forward is TE's RMSNorm kernel (weights shared, not copied)."""

    backend_name = "te.RMSNorm"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.weight is not None and self.weight.is_cuda:
            self.build_te_norm()

    def forward(self, x: Tensor) -> Tensor:
        if not x.is_cuda:
            return super().forward(x)
        return self._te_forward(x)

    @eager_when_compiled
    def _te_forward(self, x: Tensor) -> Tensor:
        te_norm = self.__dict__.get("_te_norm")
        if te_norm is None or te_norm.weight is not self.weight:  # built on meta, or weight replaced
            te_norm = self.build_te_norm(x.dtype)
        return te_norm(x)

    def build_te_norm(self, dtype: torch.dtype | None = None):
        """Create the TE module sharing our weight (at construction when the weight is on CUDA,
        else at the first CUDA forward, e.g. after meta-device initialisation)."""
        import transformer_engine.pytorch as te  # optional dependency

        eps = self.eps if self.eps is not None else torch.finfo(dtype or self.weight.dtype).eps
        te_norm = te.RMSNorm(self.normalized_shape[-1], eps=eps, device=self.weight.device,
                             dtype=self.weight.dtype)
        te_norm.weight = self.weight  # share the Parameter: grads and optimizer see one tensor
        self.__dict__["_te_norm"] = te_norm  # not a submodule: keeps state_dict keys unchanged
        return te_norm


class TECoreAttention:
    """Causal GQA attention through ``te.DotProductAttention`` (cuDNN fused / flash kernels).

    A plain object (no parameters, no state) so that installing it changes no state_dict key.
    """

    backend_name = "te.DotProductAttention"

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self._dpa = None
        self._thd = None
        self.calls_te = 0
        self.calls_fallback = 0

    def _module(self):
        if self._dpa is None:
            import transformer_engine.pytorch as te  # optional dependency

            self._dpa = te.DotProductAttention(
                self.num_heads, self.head_dim, num_gqa_groups=self.num_kv_heads,
                attention_dropout=0.0, qkv_format="bshd", attn_mask_type="causal")
        return self._dpa

    def _thd_module(self):
        """The packed-documents kernel: THD tensors [tokens, heads, d], a causal mask per document."""
        if self._thd is None:
            import transformer_engine.pytorch as te  # optional dependency

            self._thd = te.DotProductAttention(
                self.num_heads, self.head_dim, num_gqa_groups=self.num_kv_heads,
                attention_dropout=0.0, qkv_format="thd", attn_mask_type="padding_causal")
        return self._thd

    @eager_when_compiled
    def __call__(self, q: Tensor, k: Tensor, v: Tensor, documents: DocumentLayout | None = None) -> Tensor:
        """q [b, h, s, d], k/v [b, h_kv, s, d] → [b, s, h·d]; within each document of ``documents``."""
        b, _, s, _ = q.shape
        runs_te = q.is_cuda and q.dtype in (torch.bfloat16, torch.float16)
        if documents is not None and (not runs_te or documents.cu_seqlens is None):
            self.calls_fallback += 1
            return masked_document_attention(q, k, v, documents)
        if not runs_te:
            self.calls_fallback += 1
            k, v = expand_kv_heads(k, v, self.num_heads)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return out.transpose(1, 2).reshape(b, s, -1)
        self.calls_te += 1
        if documents is not None:
            q, k, v = (t.transpose(1, 2).clone(memory_format=torch.contiguous_format).view(b * s, -1, self.head_dim)
                       for t in (q, k, v))
            cu, longest = documents.cu_seqlens, documents.max_seqlen
            out = self._thd_module()(q, k, v, qkv_format="thd", attn_mask_type="padding_causal",
                                     cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=longest, max_seqlen_kv=longest)
            return out.reshape(b, s, -1)
        # bshd with canonical strides: TE infers the layout from strides, and tensors coming out of a
        # compiled graph can carry unusual strides on size-1 dimensions that .contiguous() keeps.
        q, k, v = (t.transpose(1, 2).clone(memory_format=torch.contiguous_format) for t in (q, k, v))
        return self._module()(q, k, v).reshape(b, s, -1)
