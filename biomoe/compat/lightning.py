"""Private Lightning / jsonargparse hooks biomoe relies on. Tested with Lightning 2.6 and
jsonargparse 4.53.

biomoe's CLI, progress bar and best-model checkpoint override five private methods (their names are
listed in ``OVERRIDDEN``, so a test notices when Lightning renames one; the checkpoint relies on
``ModelCheckpoint._save_checkpoint`` wrapping each file it writes, hooks included); through the
functions below it reads the CLI parser's subcommands and the Trainer's logging decision, asks a
module or callback for its Trainer without Lightning's "not attached" error, sets up the process
group and device mesh the way ``ModelParallelStrategy`` does, removes the logging methods the
Trainer binds onto callbacks, reads and sets the device a weight average is built on (and its model
and update), and names the private Lightning functions on a traceback that tell a user's
configuration error from a bug
(:data:`BUILD_PHASE_FRAMES`, :data:`CHECKPOINT_SELECTION_FRAMES`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

TESTED_WITH = ("2.6",)

OVERRIDDEN: dict[str, tuple[str, ...]] = {
    "lightning.pytorch.cli.LightningCLI": ("_add_subcommands", "_parse_ckpt_path", "_run_subcommand"),
    "lightning.pytorch.callbacks.RichProgressBar": ("_get_train_description",),
    "lightning.pytorch.callbacks.ModelCheckpoint": ("_save_checkpoint",),
}
"""Private methods biomoe's subclasses override: class path -> method names."""


def subcommand_choices(parser: Any) -> Iterator[Any]:
    """The help entries of a jsonargparse parser's subcommands (to set their one-line help)."""
    yield from parser._subcommands_action._choices_actions


def add_subcommand(parser: Any, name: str, subparser: Any, help: str) -> None:
    """Register ``name`` in the parser's subcommands (listed by ``--help`` and in its errors)."""
    parser._subcommands_action.add_subcommand(name, subparser, help=help)


def subcommand_parsers(cli: Any) -> dict[str, Any]:
    """A ``LightningCLI``'s parser of each subcommand it built, by name (empty before it built any)."""
    return dict(getattr(cli, "_subcommand_parsers", {}))


def set_option_help(parser: Any, dest: str, text: str) -> None:
    """Replace the help of the option whose destination is ``dest`` (jsonargparse builds a
    Trainer method's options with that method's docstring)."""
    for action in parser._actions:
        if action.dest == dest:
            action.help = text


def set_negative_number_matcher(parser: Any, pattern: Any) -> None:
    """Which tokens argparse reads as (negative) numbers rather than option names: Python 3.11's
    default takes ``-1e-3`` for an option."""
    parser._negative_number_matcher = pattern


def attached_trainer(owner: Any) -> Any | None:
    """The Trainer a LightningModule or callback is attached to, or None (``.trainer`` raises)."""
    return getattr(owner, "_trainer", None)


def setup_distributed(strategy: Any) -> None:
    """Start the process group as ``ModelParallelStrategy.setup_environment`` does (its own mesh
    set-up, which a subclass with other mesh dimensions replaces, is a separate step)."""
    strategy._setup_distributed()


def set_device_mesh(strategy: Any, mesh: Any) -> None:
    """Make ``mesh`` the strategy's ``device_mesh`` and its LightningModule's (read in
    ``configure_model``), as ``ModelParallelStrategy.setup_environment`` does with its own."""
    strategy._device_mesh = mesh
    if strategy.lightning_module is not None:
        strategy.lightning_module._device_mesh = mesh


BUILD_PHASE_FRAMES: tuple[str, ...] = ("_parse_ckpt_path", "_set_seed", "_instantiate_trainer")
"""Private ``LightningCLI`` methods that run while the configuration is turned into objects (beside
the public ``parse_arguments``, ``instantiate_classes`` and ``instantiate_trainer``)."""

CHECKPOINT_SELECTION_FRAMES: tuple[str, ...] = ("_parse_ckpt_path", "_select_ckpt_path",
                                                "_restore_modules_and_callbacks")
"""Private methods of ``LightningCLI`` and the Trainer's checkpoint connector that resolve and open
``ckpt_path`` (beside the public ``resume_start``)."""


def logs_this_step(trainer: Any) -> bool:
    """True when Lightning will write logged metrics this step (``log_every_n_steps``)."""
    return bool(trainer._logger_connector.should_update_logs)


MODEL_LOGGING_ATTRIBUTES = ("log", "log_dict")
"""What the Trainer binds onto every callback at fit start (``_attach_model_logging_functions``):
the LightningModule's own bound ``log`` methods, which keep the module alive with the callback."""


def detach_model_logging(callback: Any) -> None:
    """Drop the module's logging methods the Trainer bound onto ``callback`` (it outlives the fit)."""
    for attr in MODEL_LOGGING_ATTRIBUTES:
        callback.__dict__.pop(attr, None)


def weight_averaging_device(callback: Any) -> Any | None:
    """The ``device`` a ``WeightAveraging`` callback was given (None: Lightning's default, the
    module's device when ``setup`` runs, which is before the strategy moves it)."""
    return callback._device


def set_weight_averaging_device(callback: Any, device: Any) -> None:
    """Where a ``WeightAveraging`` callback builds its average (read in its ``setup``)."""
    callback._device = device


def weight_averaging_model(callback: Any) -> Any | None:
    """The ``AveragedModel`` a ``WeightAveraging`` callback built in ``setup`` (None before)."""
    return callback._average_model


def set_weight_averaging_update(callback: Any, multi_avg_fn: Any) -> None:
    """The multi-tensor update a ``WeightAveraging`` callback hands to its ``AveragedModel``
    (replacing a per-tensor ``avg_fn``; read in its ``setup``)."""
    callback._kwargs.pop("avg_fn", None)
    callback._kwargs["multi_avg_fn"] = multi_avg_fn

