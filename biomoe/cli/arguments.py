"""The argument parser of biomoe's own subcommands (score-fasta, generate, embed, ...).

argparse answers a bad option with its usage block and exits; biomoe answers every bad input
with one line. :class:`CommandParser` turns argument errors into ``ArgumentError``, which
``biomoe.cli.main.main`` prints as ``biomoe: error: <command>: <problem> (see --help)`` with
exit code 2, the same report a wrong ``fit`` option gets. ``--help`` is unchanged.
Argument types that several commands share (:func:`positive_int`) are here too.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import NoReturn

from biomoe.checkpoint.safe_types import TRUST_ENV

__all__ = ["CommandParser", "add_batch_tokens_option", "add_checkpoint_argument", "add_device_option",
           "add_progress_option", "add_runtime_options", "checkpoint_of", "model_from_args", "parse_model_command",
           "positive_int", "runtime_overrides"]

RUNTIME_CHOICES = {"expert_backend": None, "attention_backend": ("auto", "torch", "te"),
                   "norm_backend": ("auto", "torch", "te"), "router_backend": ("auto", "torch", "te"),
                   "dispatch_backend": ("auto", "torch", "te")}
"""The kernel options of a command that runs a model: ``--expert-backend`` ... as in
``model.runtime`` (None: the registry's names, checked when the model is built)."""


class CommandParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line, raised rather than printed."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.split()[-1] if self.prog else "biomoe"
        message = " ".join(message.split())
        if not message.startswith(f"{command}: "):  # argparse re-reports an ArgumentError it caught
            message = f"{command}: {message}"
        raise argparse.ArgumentError(None, message)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def default_device() -> str:
    """``cuda`` where a CUDA device is usable, else ``cpu``."""
    import torch  # imported once a command's arguments are parsed: its --help stays fast

    return "cuda" if torch.cuda.is_available() else "cpu"


def device_or_default(text: str) -> str:
    """argparse type of ``--device``: ``auto`` (the default) is :func:`default_device`; anything
    else must name a device this machine has (one line otherwise, not a failure deep in loading).
    argparse converts a default only after parsing, so ``--help`` never asks torch for a GPU."""
    if text == "auto":
        return default_device()
    import torch  # imported once a command's arguments are parsed: its --help stays fast

    try:
        device = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a device (cpu, cuda, cuda:N)") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise argparse.ArgumentTypeError(f"{text}: no CUDA device is usable here (use --device cpu)")
        if device.index is not None and device.index >= count:
            raise argparse.ArgumentTypeError(f"{text}: this machine has {count} CUDA device(s), "
                                             f"cuda:0..cuda:{count - 1}")
    elif device.type not in ("cpu", "mps"):
        raise argparse.ArgumentTypeError(f"{text}: biomoe runs on cpu or cuda devices")
    return text


def add_device_option(parser: argparse.ArgumentParser,
                      help: str | None = "auto (the default): cuda where a CUDA device is usable, else cpu") -> None:
    """``--device`` of the commands that run a model: the GPU when there is one."""
    parser.add_argument("--device", type=device_or_default, default="auto", help=help)


def add_runtime_options(parser: argparse.ArgumentParser) -> None:
    """``--precision`` and the kernel options (``--expert-backend``, ``--attention-backend``, ...) of
    a command that runs a model, with ``model.runtime``'s meaning. Unset: torch's kernels, in bf16
    on a CUDA device and fp32 on a CPU (an FP8/FP4 ``--precision`` keeps the recorded TE kernels)."""
    group = parser.add_argument_group("how the model runs (default: torch kernels, bf16 on a GPU, fp32 on a CPU)")
    group.add_argument("--precision", default=None,
                       help="fp32 | bf16 | fp8-delayed | fp8-current | fp8-block | mxfp8 | nvfp4")
    for name, choices in RUNTIME_CHOICES.items():
        group.add_argument("--" + name.replace("_", "-"), default=None, choices=choices,
                           help="auto | loop | grouped | te | te_fused" if choices is None else None)
    group.add_argument("--compile", action="store_true", default=None,
                       help="torch.compile each block: faster on long inputs, after a compile at the first batch")


def runtime_overrides(args: argparse.Namespace) -> dict[str, str | bool]:
    """The kernel options the user set (for :func:`biomoe.inference.load.load_for_inference`)."""
    chosen = {name: getattr(args, name) for name in RUNTIME_CHOICES if getattr(args, name, None) is not None}
    if getattr(args, "compile", None):
        chosen["compile"] = True
    return chosen


def add_batch_tokens_option(parser: argparse.ArgumentParser) -> None:
    """``--batch-tokens``: tokens per forward pass (windows of several contigs and files share one)."""
    parser.add_argument("--batch-tokens", type=positive_int, default=None,
                        help="tokens per forward pass (default: 262144 on a GPU, 8192 on a CPU)")


def add_progress_option(parser: argparse.ArgumentParser) -> None:
    """``--no-progress``: the long commands show a progress bar on stderr unless asked not to."""
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def base_rate(bases: int, seconds: float) -> str:
    """``2.19 Mbp/s``, or ``6.3 kbp/s`` for a rate a CPU reaches (not ``0.006 Mbp/s``)."""
    rate = bases / max(seconds, 1e-9)
    return f"{rate / 1e6:.2f} Mbp/s" if rate >= 1e5 else f"{rate / 1e3:.1f} kbp/s"


CHECKPOINT_HELP = "checkpoint file, or a run or version folder (its best checkpoint, else the last)"
TRUST_HELP = ("load the checkpoint even if it holds pickled objects beyond tensors and biomoe's configs, "
              "which can run code: only for files from a source you trust (also BIOMOE_TRUST_CHECKPOINT=1)")


def add_checkpoint_argument(parser: argparse.ArgumentParser, inputs: str | None = None) -> None:
    """The model of a command: ``--ckpt_path CKPT`` (Lightning's name, as fit/validate/test/predict
    take it) or, as before, the first positional argument. ``inputs`` names the positional list
    that follows it (``fasta``): with ``--ckpt_path`` given, a first positional is an input."""
    parser.add_argument("ckpt", nargs="?", default=None, metavar="CKPT",
                        help=CHECKPOINT_HELP + " (or give it as --ckpt_path)")
    parser.add_argument("--ckpt_path", "--ckpt-path", dest="ckpt_path", default=None, metavar="CKPT",
                        help=CHECKPOINT_HELP)
    parser.add_argument("--trust-checkpoint", dest="trust_checkpoint", action="store_true",
                        help=TRUST_HELP)
    parser.set_defaults(checkpoint_inputs=inputs)


def is_model_path(path: str | os.PathLike[str]) -> bool:
    """Whether an input names a model rather than a genome: a ``.ckpt`` file or distributed
    checkpoint, or a folder holding checkpoints (a run or version folder). For commands whose model
    is optional, where ``CKPT genome.fa`` must be told from two FASTA inputs."""
    from biomoe.checkpoint.run_folder import checkpoints_under, is_distributed_checkpoint

    path = Path(path)
    return (path.suffix == ".ckpt" and path.exists()) or is_distributed_checkpoint(path) or \
        (path.is_dir() and bool(checkpoints_under([path])))


def checkpoint_of(args: argparse.Namespace, parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Settle :func:`add_checkpoint_argument`'s two spellings into ``args.ckpt`` (resolved: a run
    folder becomes its checkpoint, said once on stderr); ``--trust-checkpoint`` lets every read of
    a checkpoint in this command use the full unpickler."""
    inputs = getattr(args, "checkpoint_inputs", None)
    if getattr(args, "trust_checkpoint", False):  # main() restores the environment when the command ends
        os.environ[TRUST_ENV] = "1"
    if args.ckpt_path is not None:
        if args.ckpt is not None:
            if inputs is None:
                parser.error(f"the checkpoint is given twice: {args.ckpt} and --ckpt_path {args.ckpt_path}")
            setattr(args, inputs, [args.ckpt, *(getattr(args, inputs) or [])])
        args.ckpt = args.ckpt_path
    if args.ckpt is None:
        parser.error("the model is missing: give --ckpt_path CKPT")
    if inputs is not None and not getattr(args, inputs):
        parser.error(f"the following arguments are required: {inputs}")
    from biomoe.checkpoint.run_folder import resolve_checkpoint  # imports torch: only once a command runs

    args.ckpt = resolve_checkpoint(args.ckpt)
    return args


def parse_model_command(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse the options of a command that runs a checkpoint (:func:`add_checkpoint_argument`): a
    run folder given there becomes its checkpoint, said once on stderr."""
    return checkpoint_of(parser.parse_args(argv), parser)


def model_from_args(args: argparse.Namespace):
    """The checkpoint of ``args.ckpt`` built to run on ``args.device`` with the runtime options
    (:func:`add_runtime_options`) -> :class:`~biomoe.inference.load.InferenceModel`."""
    from biomoe.inference.load import load_for_inference  # torch and the model: only once a command runs
    from biomoe.inference.precision_check import check_inference_precision

    check_inference_precision(getattr(args, "precision", None), args.device)  # fp32 listed among what works
    return load_for_inference(args.ckpt, args.device, getattr(args, "precision", None), runtime_overrides(args))
