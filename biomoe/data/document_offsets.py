"""Where the documents of a packed batch start, found on the host before the batch goes to the GPU.

The packed CUDA attention kernels need the documents' offsets (``cu_seqlens``) and the longest
document (``max_seqlen``, a host int). Found from device tensors, the latter makes every forward
wait for the GPU; found from the loader's ``position_ids`` while they are still on the host, it
costs microseconds and the device is never waited for. The DataModule adds them to each batch in
``on_before_batch_transfer`` and the training module's forward reads them with
:func:`batch_documents`, which copies them to the device without waiting (they are pinned).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from biomoe.model.documents import DocumentLayout, host_document_offsets

__all__ = ["OFFSETS_KEY", "DocumentOffsets", "add_host_document_offsets", "batch_documents"]

OFFSETS_KEY = "document_offsets"


class DocumentOffsets:
    """A packed batch's document offsets as one plain object (neither tensor, mapping, sequence nor
    dataclass): Lightning neither moves nor copies it, so the offsets stay on the host, pinned, and
    :func:`batch_documents` copies them to the device without waiting. Lightning cannot infer a
    batch size from a batch that holds it, so the training module's logs name theirs."""

    __slots__ = ("cu_seqlens", "max_seqlen")

    def __init__(self, cu_seqlens: Tensor, max_seqlen: int) -> None:
        self.cu_seqlens = cu_seqlens
        """int32 [documents + 1]: where each document starts in the flattened rows, then the total."""
        self.max_seqlen = max_seqlen
        """The longest document, rounded up as :func:`host_document_offsets` rounds it."""


def add_host_document_offsets(batch: Any) -> Any:
    """``batch`` with its :class:`DocumentOffsets` added (the offsets pinned where the rows are) when
    it holds packed rows still on the host; any other batch unchanged."""
    positions = batch.get("position_ids") if isinstance(batch, dict) else None
    if positions is None or positions.device.type != "cpu" or OFFSETS_KEY in batch:
        return batch
    cu_seqlens, longest = host_document_offsets(positions.numpy())
    offsets = torch.from_numpy(cu_seqlens)
    batch[OFFSETS_KEY] = DocumentOffsets(offsets.pin_memory() if positions.is_pinned() else offsets, longest)
    return batch


def batch_documents(batch: dict[str, Any]) -> DocumentLayout | None:
    """The document layout of a batch that carries host-found offsets (None for one that does not:
    the forward then finds them itself)."""
    offsets = batch.get(OFFSETS_KEY)
    if offsets is None or batch.get("position_ids") is None:
        return None
    return DocumentLayout.of(batch["position_ids"], offsets.cu_seqlens, offsets.max_seqlen)
