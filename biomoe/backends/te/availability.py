"""Is Transformer Engine usable here, and on which GPU?

Kept separate so that every other TE module (and the CPU tests) can ask cheaply without importing
TE, which needs CUDA libraries and takes seconds to import.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass

import torch

TE_LIBRARY = "transformer_engine"
"""Transformer Engine's name in :attr:`biomoe.model.moe.experts.ExpertBackendQuery.libraries`."""


@dataclass(frozen=True)
class DeviceInfo:
    """What precision and backend choices depend on: the GPU's name and compute capability."""

    name: str
    capability: tuple[int, int]

    @property
    def capability_str(self) -> str:
        return f"{self.capability[0]}.{self.capability[1]}"


@functools.lru_cache(maxsize=None)
def te_import_error() -> str | None:
    """Why Transformer Engine is installed but cannot be used, in one line (``OSError: libcudnn...``);
    None when it imports or is not installed at all. Cached: the answer does not change.

    A broken install raises OSError or RuntimeError (a missing CUDA library, a version mismatch),
    not only ImportError; the reason is kept so that ``auto`` can say why it chose torch's kernels
    and a config that names TE can be refused with it."""
    if importlib.util.find_spec("transformer_engine") is None:
        return None
    try:
        importlib.import_module("transformer_engine.pytorch")  # optional dependency
    except Exception as exc:
        text = " ".join(f"{type(exc).__name__}: {exc}".split())
        return text if len(text) <= 200 else text[:197] + "..."
    return None


@functools.lru_cache(maxsize=None)
def te_installed() -> bool:
    """True if ``transformer_engine.pytorch`` can be imported (cached: the answer does not change)."""
    return importlib.util.find_spec("transformer_engine") is not None and te_import_error() is None


def te_usable(device: torch.device | None = None) -> bool:
    """TE kernels can run: TE imports, CUDA is present and the device (if given) is a CUDA device."""
    if device is not None and torch.device(device).type != "cuda":
        return False
    return torch.cuda.is_available() and te_installed()


def device_info(device: torch.device | int | None = None) -> DeviceInfo | None:
    """Name and compute capability of a CUDA device, or None without CUDA."""
    if not torch.cuda.is_available():
        return None
    if device is not None and torch.device(device).type != "cuda":
        return None
    index = torch.device(device).index if device is not None else None
    index = torch.cuda.current_device() if index is None else index
    return DeviceInfo(torch.cuda.get_device_name(index), torch.cuda.get_device_capability(index))
