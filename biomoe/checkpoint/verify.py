"""Verify a checkpoint before anything is loaded from it.

A checkpoint can be wrong in ways torch and Lightning only notice late, or never:

* **integrity**: torch's zip format stores a CRC-32 per member, but ``torch.load`` does not check
  it, so a flipped bit on disk or in a copy loads silently as a different weight. Every member's
  CRC is checked here (``zipfile.testzip``: one read of the file);
* **structure**: a torch file that is not a Lightning checkpoint (a bare ``state_dict``, a tensor,
  someone else's dict) fails deep inside Lightning with a ``KeyError``;
* **hyper-parameters against weights**: a file whose recorded ``model.config`` does not match its
  tensors (edited, or written by another version) ended in ``size mismatch`` from
  ``load_state_dict``; here the first differing tensor is named with both shapes;
* **non-finite weights**: a checkpoint written after training diverged validated to ``nan`` and
  exit 0; here it is refused, naming the first tensor with NaN or inf.

Every problem is one :class:`~biomoe.errors.GenomeInputError` line naming the checkpoint.
Folders (distributed checkpoints) are left to their own loader. The two checks that read every
byte (integrity, finite weights) are skipped for a file that passed them before and has not
changed since (:mod:`biomoe.checkpoint.verified`).
"""

from __future__ import annotations

import os
import time
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from biomoe.errors import GenomeInputError
from biomoe.model.config import ModelConfig
from biomoe.model.meta import meta_model
from biomoe.checkpoint import verified
from biomoe.checkpoint.hparams import recorded_model_config
from biomoe.checkpoint.read import read_checkpoint
from biomoe.checkpoint.run_folder import checkpoints_under, choose_checkpoint, say_on_stderr

__all__ = ["check_checkpoint_file", "verify_checkpoint", "resolve_checkpoint_alias", "check_integrity",
           "check_structure", "check_shapes", "check_finite", "expected_shapes"]

_MODEL_PREFIX = "model."


def check_checkpoint_file(path: str | os.PathLike[str]) -> None:
    """One-line errors for a checkpoint path that is missing or plainly not a torch checkpoint.

    Cheap (no load): torch writes a zip archive (or, in the legacy format, a pickle starting with
    byte 0x80), so a truncated download or a wrong file is caught before a long traceback.
    Folders (distributed checkpoints) are left to their loader.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise GenomeInputError(path, "checkpoint not found")
    if os.path.isdir(path):
        return
    try:
        with open(path, "rb") as fh:
            head = fh.read(1)
        is_zip = zipfile.is_zipfile(path)
    except OSError as exc:
        raise GenomeInputError(path, f"cannot read checkpoint ({exc.strerror or exc})") from None
    if not is_zip and head != b"\x80":
        raise GenomeInputError(path, "not a PyTorch checkpoint (truncated or corrupted file?)")


def check_integrity(path: str) -> None:
    """Refuse a zip checkpoint with a damaged member (CRC mismatch) or a damaged archive."""
    if not zipfile.is_zipfile(path):
        return  # legacy pickle format: no checksums to verify
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise GenomeInputError(path, f"corrupted checkpoint archive ({type(exc).__name__}: {exc})") from None
    except Exception as exc:  # zlib.error and friends from a damaged member header
        raise GenomeInputError(path, f"corrupted checkpoint archive ({type(exc).__name__}: {exc})") from None
    if bad is not None:
        raise GenomeInputError(path, f"corrupted checkpoint: member '{bad}' fails its CRC check (the file was "
                                     "damaged on disk or in a copy); refusing to load it")


def check_structure(path: str, ckpt: Any) -> dict[str, torch.Tensor]:
    """The model's tensors (``model.``-prefixed keys of ``state_dict``), or one line saying why not."""
    if not isinstance(ckpt, Mapping):
        raise GenomeInputError(path, f"not a biomoe checkpoint: the file holds a {type(ckpt).__name__}, "
                                     "not a checkpoint dict")
    state = ckpt.get("state_dict")
    if state is None:
        keys = ", ".join(repr(k) for k in list(ckpt)[:2]) + (f", ... ({len(ckpt)} in all)" if len(ckpt) > 2 else "")
        looks_bare = any(isinstance(v, torch.Tensor) for v in ckpt.values())
        hint = " (a bare state_dict? biomoe reads checkpoints written by fit or import-hf)" if looks_bare else ""
        raise GenomeInputError(path, f"not a biomoe checkpoint: no 'state_dict' (keys: {keys}){hint}")
    if not isinstance(state, Mapping):
        raise GenomeInputError(path, f"not a biomoe checkpoint: 'state_dict' is a {type(state).__name__}")
    for key, value in state.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise GenomeInputError(path, f"not a biomoe checkpoint: state_dict entry {key!r} is a "
                                         f"{type(value).__name__}, not a tensor")
    weights = {k: v for k, v in state.items() if k.startswith(_MODEL_PREFIX)}
    if not weights:
        raise GenomeInputError(path, "not a biomoe checkpoint: its state_dict has no 'model.' weights")
    return weights


def expected_shapes(config: Any, model: torch.nn.Module | None = None) -> dict[str, tuple[int, ...]]:
    """``model.``-prefixed tensor name -> shape for a model of this ModelConfig (built on the meta
    device: no memory, no initialisation), or of ``model`` when the caller has built it already."""
    model = meta_model(config) if model is None else model
    return {_MODEL_PREFIX + k: tuple(v.shape) for k, v in model.state_dict().items()}


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def check_shapes(path: str, weights: Mapping[str, torch.Tensor], config: Any, source: str,
                 model: torch.nn.Module | None = None) -> None:
    """Every tensor the model needs is present with the shape ``config`` gives it, and no other.
    ``source`` says where ``config`` came from (for the message); ``model``, if given, is that
    model already built (see :func:`expected_shapes`)."""
    expected = expected_shapes(config, model)
    missing = [k for k in expected if k not in weights]
    unexpected = [k for k in weights if k not in expected]
    for key, shape in expected.items():
        if key in weights and tuple(weights[key].shape) != shape:
            raise GenomeInputError(path, f"tensor {key} has shape {_shape(tuple(weights[key].shape))} but "
                                         f"{source} gives {_shape(shape)}: the hyper-parameters do not match "
                                         "the weights")
    if missing:
        more = f" (+{len(missing) - 1} more)" if len(missing) > 1 else ""
        raise GenomeInputError(path, f"tensor {missing[0]}{more} that {source} needs is missing: the "
                                     "hyper-parameters do not match the weights")
    if unexpected:
        more = f" (+{len(unexpected) - 1} more)" if len(unexpected) > 1 else ""
        raise GenomeInputError(path, f"tensor {unexpected[0]}{more} has no place in the model {source} "
                                     "describes: the hyper-parameters do not match the weights")


def non_finite_count(tensor: torch.Tensor) -> int:
    """How many entries of a floating tensor are NaN or inf.

    The common answer is 0, found in one read of the tensor: ``aminmax`` propagates NaN and
    returns an infinity as the minimum or maximum, with no temporary the size of the tensor (which
    ``isfinite`` would write, and which dominates its time on a large checkpoint). Entries are
    counted only when one is bad. Dtypes without ``aminmax`` (float8) are read as fp32."""
    if tensor.numel() == 0:
        return 0
    values = torch.view_as_real(tensor) if tensor.is_complex() else tensor
    try:
        low, high = values.aminmax()
    except (RuntimeError, NotImplementedError):  # e.g. float8: no kernels; NaN survives the cast
        tensor = values = values.float()
        low, high = values.aminmax()
    if bool(torch.isfinite(low) & torch.isfinite(high)):
        return 0
    return int((~torch.isfinite(tensor)).sum())  # a complex entry counts once


def _first_non_finite(tensors: Mapping[str, Any], prefix: str = "") -> tuple[str, int] | None:
    for key, value in tensors.items():
        name = f"{prefix}{key}"
        if isinstance(value, torch.Tensor):
            if value.is_floating_point() or value.is_complex():
                bad = non_finite_count(value)
                if bad:
                    return name, bad
        elif isinstance(value, Mapping):
            found = _first_non_finite(value, f"{name}.")
            if found:
                return found
        elif isinstance(value, (list, tuple)):
            found = _first_non_finite({str(i): v for i, v in enumerate(value)}, f"{name}.")
            if found:
                return found
    return None


def check_finite(path: str, ckpt: Mapping[str, Any], weights: Mapping[str, torch.Tensor]) -> None:
    """Refuse NaN/inf in the weights or in the optimizer state (resuming from either diverges)."""
    found = _first_non_finite(weights)
    if found:
        name, count = found
        raise GenomeInputError(path, f"tensor {name} has {count:,} non-finite value{'s' * (count != 1)} "
                                     "(NaN or inf): the run that wrote it had diverged; refusing to load it")
    for i, state in enumerate(ckpt.get("optimizer_states") or []):
        found = _first_non_finite(state.get("state", {}) if isinstance(state, Mapping) else {},
                                  f"optimizer_states[{i}].state.")
        if found:
            name, count = found
            raise GenomeInputError(path, f"{name} has {count:,} non-finite value{'s' * (count != 1)} "
                                         "(NaN or inf); refusing to resume from it")


def verify_checkpoint(path: str | os.PathLike[str], config: Any = None, shapes: bool = True) -> dict[str, Any]:
    """Check one checkpoint file and return its contents (loaded on the CPU).

    ``config`` is the ModelConfig the caller will build (the CLI's, after Lightning merged the
    checkpoint's hyper-parameters into it); without it, the checkpoint's own record is used, and a
    checkpoint that records none is compared with the default ModelConfig. ``shapes=False`` skips
    that comparison (for a caller that knows the model config only later).
    """
    path = os.fspath(path)
    check_checkpoint_file(path)
    if os.path.isdir(path):
        return {}
    started, stamp = time.time(), verified.file_stamp(path)
    known = verified.is_verified(stamp)  # passed the reading checks before, unchanged since
    if not known:
        check_integrity(path)
    ckpt = read_checkpoint(path)
    weights = check_structure(path, ckpt)
    if not known:
        check_finite(path, ckpt, weights)
        verified.record_verified(stamp, started)
    if not shapes:
        return ckpt
    if config is not None:
        source = "the model config"
    else:
        config = recorded_model_config(path, ckpt)
        source = "its recorded model config"
        if config is None:
            config, source = ModelConfig(), "the default model config (the checkpoint records none)"
    check_shapes(path, weights, config, source)
    return ckpt


def resolve_checkpoint_alias(alias: str, folders: list[str | os.PathLike[str]],
                             announce: Callable[[str], None] | None = say_on_stderr,
                             missing_ok: bool = False) -> str | None:
    """The file ``--ckpt_path best|last`` means for validate/test/predict, in a fresh process.

    Lightning resolves these from the running trainer's ModelCheckpoint, which in a new process has
    seen nothing. Here they mean what a user expects after ``fit``, by the same rule as a run folder
    (:mod:`biomoe.checkpoint.run_folder`) over the run's folders (``ModelCheckpoint.dirpath``, the
    logger's ``save_dir``, ``trainer.default_root_dir``): ``last`` is the newest ``last*.ckpt``,
    ``best`` the best by the monitored metric, else the last. No checkpoint at all is one line,
    or None with ``missing_ok`` (``fit --ckpt_path last`` of a job's first start).
    """
    roots = [Path(f) for f in dict.fromkeys(os.fspath(f) for f in folders if f)]
    found = checkpoints_under(roots)
    where = ", ".join(str(r) for r in roots) or "the run folder"
    lasts = [p for p in found if p.name.startswith("last")]
    if missing_ok and not (lasts if alias == "last" else found):
        return None
    if alias == "last":
        if not lasts:
            raise GenomeInputError(None, f"ckpt_path: 'last': no last*.ckpt under {where}; run fit first or give "
                                         "a checkpoint file")
        chosen, why = lasts[-1], "the newest last*.ckpt"
    else:
        if not found:
            raise GenomeInputError(None, f"ckpt_path: 'best': no checkpoint under {where}; run fit first or give a "
                                         "checkpoint file")
        chosen, why = choose_checkpoint(found)
    if announce is not None:
        announce(f"ckpt_path '{alias}': using {chosen} ({why})")
    return str(chosen)
