"""Rows that hold several documents, and attention that never crosses from one to the next.

Short records (plasmids, phages, draft contigs) are packed end to end into one row instead of
one padded row each. ``position_ids`` [batch, seq] gives each token's position inside its own
document and restarts at 0 where a document begins; a row's first token always begins one.
A token then attends to the tokens before it in the same document only, and its rotary angle
is that of its position in the document, so a document scores the same wherever it sits.

:class:`DocumentLayout` is computed once per forward pass and handed to every block, so no
layer repeats the work or waits for the host:

- on the CPU (the reference path), attention is ``F.scaled_dot_product_attention`` under a
  block-diagonal causal mask built from the document ids;
- on CUDA, the packed kernels (``torch.nn.attention.varlen.varlen_attn``, Transformer Engine's
  THD attention) read the documents' offsets in the flattened rows (``cu_seqlens``, int32) and
  the longest document (``max_seqlen``, a host int). Finding the latter from device tensors
  takes one host sync per forward; a caller that packed the rows on the host
  (:func:`host_document_offsets`) hands both over and the device is not waited for.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["DocumentLayout", "document_attention", "documents_as_rows", "host_document_offsets",
           "masked_document_attention", "varlen_available"]

SEQLEN_ROUNDING = 64
"""``max_seqlen`` is rounded up to a multiple of this (capped at the row length): the kernels only
size their grids with it, and fewer distinct values mean fewer recompilations of compiled blocks
(Transformer Engine rounds the same way when it computes the value itself)."""


def _rounded_max(longest: int, row_length: int) -> int:
    return min(-(-longest // SEQLEN_ROUNDING) * SEQLEN_ROUNDING, row_length)


def host_document_offsets(position_ids: np.ndarray) -> tuple[np.ndarray, int]:
    """``(cu_seqlens, max_seqlen)`` of rows packed on the host: int32 offsets of every document in
    the flattened ``[b·s]`` tokens (plus the total), and the (rounded) longest document."""
    starts = position_ids == 0
    starts[:, 0] = True
    cu_seqlens = np.append(np.flatnonzero(starts.reshape(-1)), starts.size).astype(np.int32)
    return cu_seqlens, _rounded_max(int(np.diff(cu_seqlens).max()), position_ids.shape[1])


@dataclass(frozen=True)
class DocumentLayout:
    """Where the documents of packed rows are, in the forms the attention kernels want."""

    position_ids: Tensor
    """[b, s] int64: each token's position inside its document (the rotary angle's)."""
    doc_ids: Tensor
    """[b, s] int64: the running count of document starts along the row (equal ids = one document)."""
    cu_seqlens: Tensor | None = None
    """int32 [documents + 1]: offsets in the flattened rows, for the packed CUDA kernels (None on CPU)."""
    max_seqlen: int | None = None
    """The longest document, rounded up (see :data:`SEQLEN_ROUNDING`); with ``cu_seqlens``."""

    @classmethod
    def of(cls, position_ids: Tensor, cu_seqlens: Tensor | None = None,
           max_seqlen: int | None = None) -> DocumentLayout:
        """The layout of ``position_ids``. On CUDA, ``cu_seqlens``/``max_seqlen`` are taken as given
        (from :func:`host_document_offsets`) or computed here with one host sync."""
        if position_ids.dim() != 2:
            raise ValueError(f"position_ids must be [batch, seq], got shape {tuple(position_ids.shape)}")
        if (cu_seqlens is None) != (max_seqlen is None):
            raise ValueError("cu_seqlens and max_seqlen go together")
        position_ids = position_ids.long()
        starts = position_ids == 0
        starts[:, 0] = True
        if cu_seqlens is not None:
            cu_seqlens = cu_seqlens.to(position_ids.device, torch.int32, non_blocking=True)
        elif position_ids.is_cuda:
            cu_seqlens, max_seqlen = cls._device_offsets(starts)
        return cls(position_ids, starts.cumsum(1), cu_seqlens, max_seqlen)

    @staticmethod
    def _device_offsets(starts: Tensor) -> tuple[Tensor, int]:
        """Offsets and the longest document from device tensors, without a data-dependent shape
        (tokens per document are counted into a buffer as long as the batch); the document count
        and the longest come back to the host together (the one sync)."""
        flat = starts.reshape(-1)
        document = flat.cumsum(0) - 1  # each token's document, over all rows
        lengths = torch.zeros_like(document).index_add_(0, document, torch.ones_like(document))
        count, longest = torch.stack([document[-1] + 1, lengths.max()]).tolist()
        cu_seqlens = torch.zeros(count + 1, dtype=torch.int32, device=starts.device)
        cu_seqlens[1:] = lengths[:count].cumsum(0)
        return cu_seqlens, _rounded_max(longest, starts.shape[1])

    def mask(self) -> Tensor:
        """[b, 1, s, s] bool for SDPA: query i sees key j when j <= i in the same document."""
        s = self.doc_ids.shape[1]
        causal = torch.ones(s, s, dtype=torch.bool, device=self.doc_ids.device).tril()
        return ((self.doc_ids[:, :, None] == self.doc_ids[:, None, :]) & causal)[:, None]


def documents_as_rows(position_ids: Tensor, *tensors: Tensor, fill: tuple) -> tuple[Tensor, ...]:
    """Packed rows ``[B, T, ...]`` as one row per document ``[D, L, ...]`` (``L``: the longest
    document), each from its row's first column, the rest ``fill`` (one value per tensor). For
    what runs along a sequence outside the network (a k-mer context, a switching state), so that it
    starts afresh at every document as attention does. Padding at a row's end is a document too."""
    starts = position_ids == 0
    starts[:, 0] = True
    document = starts.reshape(-1).cumsum(0) - 1
    position = position_ids.reshape(-1)
    count, length = int(document[-1]) + 1, int(position.max()) + 1
    rows = []
    for tensor, value in zip(tensors, fill, strict=True):
        flat = tensor.reshape(-1, *tensor.shape[2:])
        out = flat.new_full((count, length, *tensor.shape[2:]), value)
        out[document, position] = flat
        rows.append(out)
    return tuple(rows)


def masked_document_attention(q: Tensor, k: Tensor, v: Tensor, documents: DocumentLayout) -> Tensor:
    """The reference: SDPA under the block-diagonal causal mask. q [b, h, s, d], k/v [b, h_kv, s, d]
    → [b, s, h·d]."""
    b, h, s, _ = q.shape
    repeat = h // k.shape[1]
    if repeat > 1:  # expanded, as the unpacked path does, so every SDPA backend stays available
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=documents.mask())
    return out.transpose(1, 2).reshape(b, s, -1)


_VARLEN: tuple[Any, frozenset[str]] | None = None


def _varlen_function() -> tuple[Any, frozenset[str]]:
    """``(varlen_attn or None, its parameter names)``, imported on first use: importing torch's
    varlen module imports ``torch._dynamo`` (seconds), which a CPU run never needs.
    :func:`~biomoe.model.compile.apply_compile` calls it before compiling, so that traced code
    finds it imported."""
    global _VARLEN
    if _VARLEN is None:
        try:
            from torch.nn.attention.varlen import varlen_attn
        except ImportError:  # torch without it: masked SDPA everywhere
            _VARLEN = (None, frozenset())
        else:
            _VARLEN = (varlen_attn, frozenset(inspect.signature(varlen_attn).parameters))
    return _VARLEN


def varlen_available() -> bool:
    """Whether this torch has ``torch.nn.attention.varlen.varlen_attn``."""
    return _varlen_function()[0] is not None


def _varlen_attention(q: Tensor, k: Tensor, v: Tensor, documents: DocumentLayout) -> Tensor:
    """torch's packed flash attention over the documents (fp16/bf16 on CUDA)."""
    varlen, parameters = _varlen_function()
    b, h, s, d = q.shape
    q, k, v = (t.transpose(1, 2).reshape(b * s, t.shape[1], d) for t in (q, k, v))
    kwargs = {}
    # torch 2.10 took ``is_causal``; later releases a window, (-1, 0) = everything before, nothing after.
    if "window_size" in parameters:
        kwargs["window_size"] = (-1, 0)
    else:
        kwargs["is_causal"] = True
    if k.shape[1] != h:
        if "enable_gqa" in parameters:
            kwargs["enable_gqa"] = True
        else:
            k, v = k.repeat_interleave(h // k.shape[1], dim=1), v.repeat_interleave(h // k.shape[1], dim=1)
    out = varlen(q, k, v, documents.cu_seqlens, documents.cu_seqlens, documents.max_seqlen,
                 documents.max_seqlen, **kwargs)
    return out.reshape(b, s, h * d)


def document_attention(q: Tensor, k: Tensor, v: Tensor, documents: DocumentLayout) -> Tensor:
    """Causal attention within documents: the packed kernel where it runs (CUDA, fp16/bf16,
    offsets known), the masked reference otherwise. q [b, h, s, d], k/v [b, h_kv, s, d] → [b, s, h·d]."""
    if (q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) and documents.cu_seqlens is not None
            and varlen_available()):
        return _varlen_attention(q, k, v, documents)
    return masked_document_attention(q, k, v, documents)
