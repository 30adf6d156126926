"""Which exceptions are the user's input, and the one line that says so.

biomoe's own checks raise :class:`~biomoe.errors.GenomeInputError` and
:class:`~biomoe.model.config.ConfigError`, and the validation layer
(:mod:`biomoe.cli.run.config_checks`) catches out-of-range values before anything is built. What
is left are errors that Lightning, torch or jsonargparse raise about values they were given; a
user should see those as one line too, with the config key where it can be told, while a
genuine bug must keep its traceback. The rule, :func:`classify`:

* biomoe's errors anywhere in the exception chain, also re-raised from a DataLoader worker
  (torch turns them into a ``RuntimeError`` holding the worker's traceback as text);
* Lightning's ``MisconfigurationException``: Lightning's own word that a setting is wrong;
* a ``ValueError``/``TypeError`` raised while the configuration is parsed or its classes are
  instantiated (``LightningCLI.parse_arguments``/``instantiate_classes``), by Lightning, torch or
  jsonargparse code or by the ``__init__`` of a configured class: at that point only the user's
  values have been handled;
* Lightning refusing a ``ckpt_path`` (``best`` with nothing to resolve it to, ...), or naming one
  of its Trainer arguments in a ``ValueError`` once the data is known (``val_check_interval`` larger
  than an epoch).

* running out of a resource, which the user fixes with a setting or a disk, not a code change:
  host ``MemoryError`` and CUDA out-of-memory name the option that sizes the work of the command
  that ran out (``--batch-tokens``/``--batch-size``, ``--length``, ``data.seq_length`` for
  training); a full disk, file size limit, quota, read-only folder or permission refused on a file
  names the file (:func:`biomoe.files.write_failure`; writers already raise it as one line), and
  any other OS error about a path (a folder that refuses to be created, ``chattr +i``) names the path.

Anything else (an ``AttributeError`` in a training step, a ``ValueError`` from our own code in the
middle of a run) is a bug and is re-raised with its traceback.
"""

from __future__ import annotations

import errno
import inspect
import os
import re
import sys
from dataclasses import dataclass
from types import TracebackType

from biomoe.compat.lightning import BUILD_PHASE_FRAMES, CHECKPOINT_SELECTION_FRAMES
from biomoe.errors import ConfigError, GenomeInputError

__all__ = ["INTERRUPTED", "UserError", "classify", "one_line"]

_BUILD_PHASE = ("parse_arguments", "instantiate_classes", "instantiate_trainer") + BUILD_PHASE_FRAMES
_LIGHTNING = tuple(os.sep + name + os.sep for name in ("lightning", "lightning_fabric", "pytorch_lightning"))
_LIBRARIES = _LIGHTNING + (os.sep + "torch" + os.sep, os.sep + "jsonargparse" + os.sep)
_CKPT_SELECTION = CHECKPOINT_SELECTION_FRAMES + ("resume_start",)
_MAX_CHARS = 400
INTERRUPTED = ("interrupted (Ctrl-C); no output was left half-written (every file appears only once it is "
               "complete)")


@dataclass(frozen=True)
class UserError:
    """What the CLI prints (after ``biomoe: error: ``) and the exit status."""

    message: str
    exit_code: int = 2


def one_line(text: str, limit: int = _MAX_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _chain(err: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while err is not None and all(err is not e for e in seen):
        seen.append(err)
        err = err.__cause__ or err.__context__
    return seen


def _frames(tb: TracebackType | None) -> list:
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


_WORKER = re.compile(r"^Caught (\w+) in DataLoader worker process \d+\.")


def _from_worker(err: BaseException) -> UserError | None:
    """biomoe's error raised inside a DataLoader worker: the last line of the worker's traceback."""
    text = str(err)
    match = _WORKER.match(text)
    if not match or match.group(1) not in ("GenomeInputError", "ConfigError"):
        return None
    last = [line for line in text.splitlines() if line.strip()][-1]
    return UserError(one_line(last.split(": ", 1)[1] if ": " in last else last))


def _trainer_params() -> set[str]:
    from lightning.pytorch import Trainer  # imported here: cli.main imports this module; keeps --help fast

    return set(inspect.signature(Trainer.__init__).parameters) - {"self"}


def _key_from_message(message: str) -> str | None:
    """``trainer.<arg>`` when Lightning's message names a Trainer argument (```max_steps```,
    ``Trainer(devices='0')``, ``strategy='x'``)."""
    params = _trainer_params()
    for pattern in (r"Trainer\((\w+)=", r"`(\w+)`", r"\b(\w+)=", r"`(\w+)=", r"\b(\w+) must\b"):
        for name in re.findall(pattern, message):
            if name in params:
                return f"trainer.{name}"
    return None


def _key_from_frames(frames: list) -> str | None:
    """The configured class whose ``__init__`` raised (innermost first): trainer, a callback, ..."""
    # imported here: cli.main imports this module at start-up, and Lightning is slow to import
    from lightning.pytorch import Callback, Trainer
    from lightning.pytorch.loggers import Logger
    from lightning.pytorch.strategies import Strategy

    for frame in reversed(frames):
        if frame.f_code.co_name != "__init__":
            continue
        owner = frame.f_locals.get("self")
        if owner is None:
            continue
        name = type(owner).__name__
        if isinstance(owner, Callback):
            return f"trainer.callbacks.{name}"
        if isinstance(owner, Logger):
            return f"trainer.logger.{name}"
        if isinstance(owner, Strategy):
            return "trainer.strategy"
        if isinstance(owner, Trainer):
            return "trainer"
    return None


def _with_key(key: str | None, message: str) -> str:
    if key is None or message.startswith(key):
        return message
    return f"{key}: {message}"


def _raised_in(frames: list, prefixes: tuple[str, ...]) -> bool:
    return bool(frames) and any(part in frames[-1].f_code.co_filename for part in prefixes)


# The settings that size the work, per command module (a frame of ``biomoe/cli/<module>.py``).
_MEMORY_OPTIONS = {
    "score_fasta": "--batch-tokens or --batch-size (or --window)",
    "embed": "--batch-tokens or --batch-size (or --window)",
    "score_variants": "--batch-tokens",
    "routing": "--batch-size (or --seq-length)",
    "generate": "--batch-size (or --length, --num-samples)",
    "repeat_mix": "--batch-tokens or --batch-size",
}
_TRAINING_MEMORY_OPTIONS = "data.seq_length or data.batch_size (or model.config sizes)"
_RESOURCE_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EACCES)
_CLI_DIR = os.sep + os.path.join("biomoe", "cli") + os.sep


def _out_of_memory(item: BaseException) -> str | None:
    """``"host"`` or ``"GPU"`` when ``item`` says memory ran out, else None."""
    if isinstance(item, MemoryError):
        return "host"
    torch = sys.modules.get("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    if oom_type is not None and isinstance(item, oom_type):
        return "GPU"
    if isinstance(item, RuntimeError) and "CUDA out of memory" in str(item):
        return "GPU"  # raised as a plain RuntimeError by some kernels and older torch builds
    return None


def _memory_option(frames: list) -> str:
    """The option to lower: that of the biomoe command whose code ran out, else training's."""
    for frame in frames:
        filename = frame.f_code.co_filename
        if _CLI_DIR in filename:
            module = os.path.splitext(os.path.basename(filename))[0]
            if module in _MEMORY_OPTIONS:
                return _MEMORY_OPTIONS[module]
    return _TRAINING_MEMORY_OPTIONS


def _resource_error(chain: list[BaseException]) -> UserError | None:
    for item in chain:
        kind = _out_of_memory(item)
        if kind is not None:
            asked = re.search(r"Tried to allocate ([\d.]+ \w+)", str(item))
            shown = f" (allocating {asked.group(1)})" if asked else ""
            option = _memory_option(_frames(_outer_traceback(chain)))
            return UserError(f"out of {kind} memory{shown}: lower {option}", exit_code=1)
        if isinstance(item, OSError) and item.errno in _RESOURCE_ERRNOS and item.filename:
            if item.errno == errno.EACCES:  # reading or writing: the file is named either way
                return UserError(one_line(f"{item.filename}: permission denied"))
            from biomoe.files import write_failure

            failure = write_failure(item.filename, item)
            return UserError(one_line(failure)) if failure is not None else None
    for item in chain:
        if isinstance(item, OSError) and item.filename and item.strerror:
            # a folder that refuses to be created or written (chattr +i: EPERM), a path through a
            # file, a name too long: the file system's answer about one path, named in one line
            return UserError(one_line(f"{_output_of(os.fspath(item.filename))}: {item.strerror.lower()}"))
    return None


def _output_of(path: str) -> str:
    """The output a temporary beside it belongs to (``.x.store.biomoe-tmp-123-ab`` -> ``x.store``),
    else ``path``: a temporary's name means nothing to the user."""
    from biomoe.temporaries import TEMP_MARK

    folder, name = os.path.split(path)
    if name.startswith(".") and TEMP_MARK in name:
        return os.path.join(folder, name[1:name.index(TEMP_MARK)])
    return path


def _outer_traceback(chain: list[BaseException]):
    """The outermost traceback, which reaches from the command's frames down to where it failed."""
    return chain[0].__traceback__ if chain else None


def classify(err: BaseException) -> UserError | None:
    """The one line for a user-input error, or None for a bug (keep the traceback)."""
    # imported here: cli.main imports this module at start-up; both pull in Lightning (--help stays fast)
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    from biomoe.training.guards.health import NonFiniteError

    chain = _chain(err)
    if any(isinstance(item, KeyboardInterrupt) for item in chain):
        return UserError(INTERRUPTED, exit_code=130)  # e.g. torch's writer, cut off mid-write by Ctrl-C
    for item in chain:
        if isinstance(item, NonFiniteError):
            return UserError(one_line(item), exit_code=1)  # training diverged: not an input error
        if isinstance(item, (GenomeInputError, ConfigError)):
            worker = _from_worker(item)
            return worker or UserError(one_line(item))
        worker = _from_worker(item)
        if worker is not None:
            return worker
    resource = _resource_error(chain)
    if resource is not None:
        return resource
    for item in chain:
        frames = _frames(item.__traceback__)
        message = one_line(item)
        if isinstance(item, MisconfigurationException):
            return UserError(_with_key(_key_from_message(message) or _key_from_frames(frames), message))
        if any(frame.f_code.co_name == "_validate_callbacks_list" for frame in frames):
            # two callbacks whose saved states would collide (e.g. two ModelCheckpoints alike)
            return UserError(_with_key("trainer.callbacks", message.split(" HINT:")[0]))
        if not isinstance(item, (ValueError, TypeError)):
            continue
        names = {frame.f_code.co_name for frame in frames}
        if names & set(_BUILD_PHASE):
            innermost_init = bool(frames) and frames[-1].f_code.co_name == "__init__"
            if _raised_in(frames, _LIBRARIES) or innermost_init:
                return UserError(_with_key(_key_from_message(message) or _key_from_frames(frames), message))
        if names & set(_CKPT_SELECTION) and _raised_in(frames, _LIBRARIES):
            return UserError(_with_key("ckpt_path", message))
        key = _key_from_message(message) if _raised_in(frames, _LIGHTNING) else None
        if key is not None:  # Lightning, mid-run, refusing one of the Trainer arguments by name
            return UserError(_with_key(key, message))
    return None
