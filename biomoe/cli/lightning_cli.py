"""biomoe's LightningCLI: ``fit``, ``validate``, ``test`` and ``predict``.

Every value is range-checked before anything is built (:mod:`biomoe.cli.run.config_checks`), every
checkpoint is verified before it is loaded (:mod:`biomoe.checkpoint.verify`), a run folder given
as ``--ckpt_path`` resolves to its best checkpoint, and the commands that score a checkpoint read
the data settings it records (:mod:`biomoe.cli.checkpoint_data`). What a run writes, where it
resumes from and what it reports are :mod:`biomoe.cli.run`'s.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import re
import sys
import warnings

from jsonargparse import set_parsing_settings
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.strategies import ModelParallelStrategy, Strategy

from biomoe import output_checks
from biomoe.checkpoint.hparams import model_config_from
from biomoe.checkpoint.read import read_checkpoint, refusal
from biomoe.checkpoint.records import training_data_settings
from biomoe.checkpoint.save import AtomicCheckpointIO
from biomoe.checkpoint.verify import (check_checkpoint_file, check_shapes, check_structure, resolve_checkpoint_alias,
                                      verify_checkpoint)
from biomoe.cli import DESCRIPTION
from biomoe.cli.checkpoint_data import (EVALUATING, data_keys_on_command_line, describe, fasta_chosen,
                                        settings_to_apply)
from biomoe.cli.commands import COMMANDS, EXTRA_COMMANDS
from biomoe.cli.run import trainer_setup
from biomoe.cli.run.config_checks import validate_config
from biomoe.cli.run.config_values import get, mapping
from biomoe.cli.run.folders import (checkpoint_folders, follow_root_dir, options_given, predictions_folder,
                                    remove_unstarted_run_folder, resolve_run_folder, scoring_logs_nothing)
from biomoe.cli.run.memory_check import check_training_memory
from biomoe.cli.run.progress_lines import ProgressLines
from biomoe.cli.run.resume import check_resume_model, resume_from_last
from biomoe.cli.run.summary import fit_summary
from biomoe.cli.run.validation_note import ValidationNote
from biomoe.cli.saved_config import AtomicSaveConfigCallback
from biomoe.compat.lightning import (add_subcommand, set_negative_number_matcher, set_option_help,
                                     subcommand_choices, subcommand_parsers)
from biomoe.data.datamodule import GenomeDataModule
from biomoe.errors import GenomeInputError
from biomoe.model.config import ConfigError, check_expert_parallel
from biomoe.training.guards.preemption import SaveOnSigterm
from biomoe.training.guards.time_limit import StopAtTimeLimit
from biomoe.training.reports.history import RunRecord, install_metrics_history, install_run_record
from biomoe.training.reports.markov_baseline import MarkovBaseline
from biomoe.training.reports.prediction_writer import WindowScoreWriter
from biomoe.training.step.lightning_module import BioMoEModule

__all__ = ["BioMoECLI", "install_atomic_checkpoint_io", "install_markov_baseline", "run_lightning_cli"]

# BioMoEModule arguments that choose how to run, not what the model is: a --ckpt_path's
# hyperparameters do not override them.
RUNTIME_SWITCHES: tuple[str, ...] = ("runtime",)



SCORED_CKPT_HELP = ("The checkpoint to score (also as the first argument): a checkpoint file, a version folder or a "
                    "run folder (its best checkpoint by val/bits_per_base among runs validated on the same data, "
                    "else the last), or best / last of the run folder the config names. Without it the weights are "
                    "untrained.")
CKPT_PATH_HELP: dict[str, str] = {
    "fit": ("Resume a run: last (the newest last.ckpt of the run folder the config names, in whichever version "
            "folder; a fresh start when there is none, so one command serves a first start and every restart), "
            "or a last.ckpt file. A checkpoint without optimizer state (a best checkpoint, import-hf's) is not "
            "resumed: start from its weights with --trainer.callbacks+=biomoe.training.optimization.init_weights."
            "InitWeights --trainer.callbacks.checkpoint CKPT."),
    "validate": SCORED_CKPT_HELP, "test": SCORED_CKPT_HELP, "predict": SCORED_CKPT_HELP,
}
"""``--ckpt_path`` of each Lightning command as biomoe reads it (run folders, best/last), in place of
the Trainer's docstring (which speaks of registries and HPC checkpoints)."""

# A negative number, also in scientific notation, is a value and never an option name.
NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|nan)$")


class BioMoECLI(LightningCLI):
    """LightningCLI that reports where results went after ``fit`` and checks vocab sizes."""

    def __init__(self, *args, **kwargs) -> None:
        # Building a subcommand's parser from the classes' signatures is a visible part of start-up: with the
        # command line's subcommand first (``fit ...``), only that one is built, the others are
        # stubs like the commands main() runs (they are never parsed).
        given = kwargs.get("args")
        first = given[0] if isinstance(given, list) and given else None
        self._only_subcommand = first if first in LightningCLI.subcommands() else None
        super().__init__(*args, **kwargs)

    def subcommands(self) -> dict[str, set[str]]:
        """Lightning's subcommands (see ``__init__``: the one given, where one was)."""
        every = LightningCLI.subcommands()
        only = getattr(self, "_only_subcommand", None)
        return {only: every[only]} if only is not None else every

    def _add_subcommands(self, parser, **kwargs) -> None:
        """Lightning's subcommands, then the ones :func:`main` runs itself (their stub parsers are
        never parsed): ``--help`` and an unknown subcommand's error then list every command."""
        super()._add_subcommands(parser, **kwargs)
        for choice in subcommand_choices(parser):
            choice.help = COMMANDS[choice.dest].summary if choice.dest in COMMANDS else choice.help
        for name, subcommand_parser in subcommand_parsers(self).items():
            if name in CKPT_PATH_HELP:
                set_option_help(subcommand_parser, "ckpt_path", CKPT_PATH_HELP[name])
        built = set(self.subcommands())
        for name in [n for n in LightningCLI.subcommands() if n not in built] + list(EXTRA_COMMANDS):
            summary = COMMANDS[name].summary
            add_subcommand(parser, name, type(parser)(description=summary, add_help=False), summary)

    def init_parser(self, **kwargs):
        """Lightning's parser, reading ``-1e-3`` as a number (Python 3.11's argparse takes a negative
        number in scientific notation for an option: ``--model.optim.lr -1e-3`` failed with
        "argument --model.optim: expected one argument")."""
        parser = super().init_parser(**kwargs)
        set_negative_number_matcher(parser, NEGATIVE_NUMBER)
        return parser

    def before_instantiate_classes(self) -> None:
        """Register the inputs (no output may replace them) before anything is built."""
        section = self.config[self.subcommand]
        data = section.get("data") or {}
        fasta = data.get("fasta")
        output_checks.protect_inputs([os.fspath(c) for c in section.get("config") or []])
        output_checks.protect_inputs([fasta] if isinstance(fasta, (str, os.PathLike)) else list(fasta or []))
        ckpt = section.get("ckpt_path")
        if self.subcommand != "fit" and isinstance(ckpt, (str, os.PathLike)):
            output_checks.protect_inputs([ckpt])  # fit may replace the last.ckpt it resumes from (atomically)

    def parse_arguments(self, parser, args) -> None:
        """Keep the command line: settings given there win over a checkpoint's (see
        :meth:`_apply_checkpoint_data`), settings from a ``--config`` file do not. A
        ``--trainer.default_root_dir`` given there moves the whole run (:func:`follow_root_dir`), and a
        GPU precision from a config file becomes 32-true on a CPU
        (:func:`~biomoe.cli.run.trainer_setup.choose_cpu_precision`)."""
        self._argv = list(sys.argv[1:] if args is None else args)
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        if subcommand:
            given = options_given(self._argv)
            follow_root_dir(self.config[subcommand], given)
            trainer_setup.cap_loader_workers(self.config[subcommand], given)
            if subcommand in EVALUATING:
                scoring_logs_nothing(self.config[subcommand], given)
                trainer_setup.quiet_lightning_tips(scoring=True)  # before LightningCLI seeds
            note = trainer_setup.choose_cpu_precision(self.config[subcommand], given)
            if note:
                print(note, file=sys.stderr)

    def instantiate_classes(self) -> None:
        """Before anything is built: a missing logger package as one line, Lightning's start-up tips
        silenced, and TF32 matrix products on GPUs with tensor cores."""
        trainer = self.config[self.subcommand].get("trainer") or {}
        trainer_setup.check_logger_packages(trainer.get("logger"))
        trainer_setup.check_accelerator(trainer.get("accelerator"))
        trainer_setup.quiet_lightning_tips(scoring=self.subcommand in EVALUATING)
        trainer_setup.set_matmul_precision(trainer.get("accelerator"))
        super().instantiate_classes()

    def instantiate_trainer(self, **kwargs):
        # The user's callbacks, read before the Trainer exists: it appends its default ones (the
        # progress bar among them) to this same list.
        configured = self.config_init[self.subcommand].get("trainer", {}).get("callbacks") or []
        configured = list(configured) if isinstance(configured, list) else [configured]
        trainer = super().instantiate_trainer(**kwargs)
        install_atomic_checkpoint_io(trainer)
        install_markov_baseline(trainer)
        if not any(isinstance(cb, ProgressLines) for cb in trainer.callbacks):
            trainer.callbacks.append(ProgressLines())  # prints only where no progress bar runs
        if not any(isinstance(cb, SaveOnSigterm) for cb in trainer.callbacks):
            # SIGTERM, and Ctrl-C between steps, leave a resumable last.ckpt; Ctrl-C says what was saved
            trainer.callbacks.append(SaveOnSigterm(command=getattr(self, "_argv", None)))
        if not any(isinstance(cb, StopAtTimeLimit) for cb in trainer.callbacks):
            trainer.callbacks.append(StopAtTimeLimit())  # max_time holds within a step, with no validation after
        if self.subcommand == "fit" and not any(isinstance(cb, ValidationNote) for cb in trainer.callbacks):
            trainer.callbacks.append(ValidationNote())  # a genome too short to validate on says so
        trainer_setup.install_per_genome_metrics(trainer)
        install_metrics_history(trainer)
        install_run_record(trainer)
        trainer_setup.install_progress_bar(trainer, configured)
        trainer_setup.install_model_summary(trainer, configured)
        return trainer

    def _run_subcommand(self, subcommand: str) -> None:
        """Lightning's, and a run that never started leaves no folder behind: a start that fails
        (a precision this machine lacks, data that cannot be used) removes the version folder it
        created, so ``runs/`` lists only runs that ran (:func:`remove_unstarted_run_folder`)."""
        log_dir = self.trainer.log_dir  # every rank asks (a broadcast once processes are joined)
        created = self.trainer.is_global_zero and log_dir is not None and not os.path.exists(log_dir)
        try:
            super()._run_subcommand(subcommand)
        except BaseException:
            record = next((cb for cb in self.trainer.callbacks if isinstance(cb, RunRecord)), None)
            if created and (record is None or not record.started):
                remove_unstarted_run_folder(log_dir)
            raise

    def _apply_checkpoint_data(self) -> None:
        """validate/test/predict score the data the checkpoint records (its FASTA files and held-out
        splits) unless the command line sets them; one line says what the checkpoint changed."""
        subcommand = self.config.get("subcommand")
        if subcommand not in EVALUATING:
            return
        section = self.config[subcommand]
        ckpt = section.get("ckpt_path")
        if not isinstance(ckpt, (str, os.PathLike)):
            return
        current = section.get("data")
        saved = training_data_settings(ckpt)
        given = data_keys_on_command_line(getattr(self, "_argv", []))
        if current is not None and os.path.isfile(ckpt) and "fasta" not in saved and not fasta_chosen(
                given, section.get("config")):
            raise GenomeInputError(ckpt, f"records no training data (as a checkpoint written by import-hf): "
                                         f"give the genome to {subcommand} on with --data.fasta FASTA")
        if not saved or current is None:
            return
        changes = settings_to_apply(saved, mapping(current), given)
        if changes:
            self.config = self.parser.parse_object({subcommand: {"data": changes}}, self.config)
            print(describe(changes), file=sys.stderr)

    def before_validate(self) -> None:
        self._check_vocab()
        self._check_inputs()
        self._check_ckpt_folder()
        self._warn_untrained()

    def before_test(self) -> None:
        self._check_vocab()
        self._check_inputs()
        self._check_ckpt_folder()
        self._warn_untrained()
        data = self.datamodule
        if isinstance(data, GenomeDataModule) and not data.has_test_split and (
                "trainer.limit_test_batches" not in options_given(getattr(self, "_argv", []))):
            # test then scores the validation split: with validation's batch limit, so that its
            # figures (network and Markov baseline) are validate's, not those of another subset;
            # a --trainer.limit_test_batches on the command line is the user's and stays
            self.trainer.limit_test_batches = self.trainer.limit_val_batches

    def before_predict(self) -> None:
        """``predict`` always writes its results: add a writer unless the config has one."""
        self._check_vocab()
        self._check_inputs()
        self._check_ckpt_folder()
        self._warn_untrained()
        if not any(isinstance(cb, BasePredictionWriter) for cb in self.trainer.callbacks):
            # into the logger's version folder where one logs, else under a --trainer.default_root_dir
            # given, else beside the checkpoint in its run's version folder
            beside = None
            if self.trainer.logger is None and "trainer.default_root_dir" not in options_given(
                    getattr(self, "_argv", [])):
                beside = predictions_folder(self.config[self.subcommand].get("ckpt_path"))
            self.trainer.callbacks.append(WindowScoreWriter(output_dir=beside))

    def before_fit(self) -> None:
        self._check_vocab()
        self._check_parallel()
        self._check_ckpt_folder()
        check_training_memory(self.model, self.datamodule, self.trainer)

    def _check_inputs(self) -> None:
        """validate/test/predict read the held-out split: refuse to run without one (rather than
        validating nothing and exiting 0, or failing in the predict loader)."""
        data = self.datamodule
        if not isinstance(data, GenomeDataModule) or data.has_val_split or (
                self.subcommand == "test" and data.has_test_split):
            return
        raise ConfigError(f"data.val_fraction=0 and no data.val_contigs or data.val_files: there is no held-out "
                          f"split to {self.subcommand} on")

    def _warn_untrained(self) -> None:
        """validate/test/predict without --ckpt_path score freshly initialised weights: say so."""
        if self.config[self.subcommand].get("ckpt_path") is None:
            print(f"biomoe: warning: {self.subcommand} without --ckpt_path uses untrained (randomly "
                  "initialised) weights; pass --ckpt_path with a checkpoint from fit", file=sys.stderr)

    def _check_ckpt_folder(self) -> None:
        """A folder checkpoint (torch.distributed.checkpoint) loads only under a strategy that reads
        folders (expert parallel); one that torch.loads a file failed on it with a traceback."""
        ckpt = self.config.get(self.subcommand, {}).get("ckpt_path")
        strategy = self.trainer.strategy
        loads_a_file = (type(strategy).load_checkpoint is Strategy.load_checkpoint
                        and isinstance(strategy.checkpoint_io, TorchCheckpointIO))
        if isinstance(ckpt, (str, os.PathLike)) and os.path.isdir(ckpt) and loads_a_file:
            raise GenomeInputError(ckpt, "is a distributed checkpoint (a folder), which only the expert-parallel "
                                         "strategy reads; for one device convert it to a file first: "
                                         f"python -m biomoe.checkpoint.distributed {ckpt} model.ckpt")

    def _parse_ckpt_path(self) -> None:
        """Lightning reads ``--ckpt_path``'s hyperparameters right after parsing and lets them override
        the config and command line. How to run (``model.runtime``: precision recipe, kernels, compile,
        activation checkpointing) is not a property of the weights: it keeps the values given here, so
        a run trained in FP8 on a GPU can be validated on a CPU, and the other way round."""
        resolve_run_folder(self.config)
        model = self.config.get(self.config.get("subcommand") or "", {}).get("model")
        keep = {key: model[key] for key in RUNTIME_SWITCHES if model is not None and key in model}
        asked = mapping(get(model, "config")) if self.config.get("subcommand") == "fit" else None
        self._parse_ckpt_hparams()
        for key, value in keep.items():
            self.config[self.config["subcommand"]]["model"][key] = value
        if asked is not None:
            check_resume_model(self.config["fit"], asked)
        if self.config.get("subcommand"):  # every value range-checked before anything is built or seeded
            validate_config(self.config[self.config["subcommand"]], self.config["subcommand"])
        self._apply_checkpoint_data()

    def _parse_ckpt_hparams(self) -> None:
        """Lightning's ``_parse_ckpt_path``; a missing, truncated or foreign file is one line naming it,
        not a traceback from torch.load."""
        ckpt = self.config.get(self.config.get("subcommand") or "", {}).get("ckpt_path")
        if not isinstance(ckpt, (str, os.PathLike)):
            return super()._parse_ckpt_path()
        text = os.fspath(ckpt)
        subcommand = self.config["subcommand"]
        if text in ("best", "last") and subcommand != "fit":
            # the run folders' checkpoints (see resolve_checkpoint_alias)
            text = resolve_checkpoint_alias(text, checkpoint_folders(self.config[subcommand]))
            self.config[subcommand]["ckpt_path"] = text
        elif text == "last":  # fit: the run's newest last*.ckpt, in whichever version folder it is
            text = resume_from_last(self.config[subcommand])
            self.config[subcommand]["ckpt_path"] = text
            if text is None:
                return None
        if text in ("best", "last", "hpc") or text.startswith("registry") or "://" in text:
            return super()._parse_ckpt_path()  # Lightning's special values and remote URLs
        check_checkpoint_file(text)
        if os.path.isfile(text):  # integrity, structure, finite weights before Lightning reads it
            verify_checkpoint(text, shapes=False)
        try:
            self._ckpt_file_hparams(text) if os.path.isfile(text) else super()._parse_ckpt_path()
        except (RuntimeError, EOFError, pickle.UnpicklingError) as exc:
            refused = refusal(exc)
            detail = " ".join(str(exc).split())[:200]
            raise GenomeInputError(text,
                                   refused or f"cannot load checkpoint ({type(exc).__name__}: {detail})") from None
        if os.path.isfile(text):
            self._verify_ckpt(text)

    def _ckpt_file_hparams(self, path: str) -> None:
        """Lightning's ``_parse_ckpt_path`` for a checkpoint file, read as every biomoe reader reads
        one (weights-only unless the user trusts it; Lightning's own read refuses a trusted file's
        other pickled objects, a callback's state), with configs recorded as dataclasses (by an
        older ``import-hf``) passed on as the plain fields the parser reads."""
        hparams = {key: dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
                   for key, value in dict(read_checkpoint(path).get("hyper_parameters") or {}).items()}
        hparams.pop("_instantiator", None)
        if not hparams:
            return
        if "_class_path" in hparams:
            hparams = {"class_path": hparams.pop("_class_path"), "dict_kwargs": hparams}
        self.config = self.parser.parse_object({self.config.subcommand: {"model": hparams}}, self.config)

    def _verify_ckpt(self, path: str) -> None:
        """The checkpoint's tensors against the model about to be built (its config, now merged
        with the checkpoint's hyper-parameters): one line naming the first tensor that differs."""
        section = self.config[self.config["subcommand"]]
        config = model_config_from(mapping(get(get(section, "model"), "config")) or {})
        ckpt = read_checkpoint(path)
        check_shapes(path, check_structure(path, ckpt), config, "the model config")
        if self.config["subcommand"] == "fit" and "optimizer_states" not in ckpt:
            raise GenomeInputError(path, "holds no optimizer state (a best checkpoint keeps only what scoring "
                                         "needs), so fit cannot resume it; resume the run's last.ckpt "
                                         "(--ckpt_path last), or start a new run from these weights with "
                                         "--trainer.callbacks+=biomoe.training.optimization.init_weights.InitWeights "
                                         f"--trainer.callbacks.checkpoint {path} instead of --ckpt_path")

    def _check_parallel(self) -> None:
        """EP layout errors as one line before any process is launched."""
        strategy = self.trainer.strategy
        ep = getattr(strategy, "expert_parallel_size", None)
        if ep is not None:
            check_expert_parallel(self.model.config.num_experts, ep,
                                  self.trainer.num_nodes * self.trainer.num_devices,
                                  getattr(strategy, "data_parallel_replicate_size", 1))

    def _check_vocab(self) -> None:
        data_vocab = getattr(self.datamodule, "vocab_size", None)
        model_vocab = self.model.config.vocab_size
        if data_vocab is not None and data_vocab > model_vocab:
            raise ConfigError(f"model.config.vocab_size={model_vocab} is smaller than the "
                              f"tokenizer's padded vocabulary ({data_vocab})")

    def after_fit(self) -> None:
        """Checkpoints, logs, the training-curve plot and held-out bits/base beside the Markov
        baseline, whatever the logger (:mod:`biomoe.cli.run.summary`)."""
        log_dir = self.trainer.log_dir  # a broadcast under several processes: every rank must ask
        if self.trainer.is_global_zero:
            print(fit_summary(self.trainer, log_dir))


def install_atomic_checkpoint_io(trainer) -> None:
    """Make single-file checkpoints atomic unless the user chose their own CheckpointIO.

    Strategies that write distributed checkpoints (directories via torch.distributed.checkpoint)
    keep their own writer.
    """
    strategy = trainer.strategy
    if isinstance(strategy, ModelParallelStrategy):
        return
    if type(strategy.checkpoint_io) is TorchCheckpointIO:
        strategy.checkpoint_io = AtomicCheckpointIO()


def install_markov_baseline(trainer) -> None:
    """Report an order-6 Markov baseline next to val/test bits/base unless the config has one."""
    if not any(isinstance(cb, MarkovBaseline) for cb in trainer.callbacks):
        trainer.callbacks.append(MarkovBaseline())


def run_lightning_cli(args: list[str] | None = None, cli_class: type[BioMoECLI] | None = None) -> BioMoECLI:
    """The CLI ``cli.py`` runs; ``cli_class`` (a subclass) lets the benchmark replace the ``fit``
    subcommand's last call (LightningCLI runs a method named like the subcommand instead of the
    Trainer's) while everything before it is built exactly as for users."""
    # Option help comes from the docstrings under each config dataclass field (``fit --help``,
    # ``--model.config.help ModelConfig``); jsonargparse reads those only when asked to.
    set_parsing_settings(docstring_parse_attribute_docstrings=True)
    # Every command that loads a checkpoint does so into a trainer whose checkpoint folder is not
    # the one it was written in (a resumed fit writes into a new version folder): ModelCheckpoint's
    # note that it will not track the old top-k files is about Lightning's bookkeeping, not the run
    # (the best checkpoint is still found, and a resumed run's record is kept by RunRecord).
    warnings.filterwarnings("ignore", message=r".*dirpath has changed from")
    return (cli_class or BioMoECLI)(
        BioMoEModule,
        GenomeDataModule,
        # The optimizer and schedule are model.optim (AdamW with weight-decay groups, warm-up and
        # cosine decay, built by BioMoEModule.configure_optimizers); Lightning's generic
        # --optimizer/--lr_scheduler would bypass them, so they are not offered.
        auto_configure_optimizers=False,
        save_config_callback=AtomicSaveConfigCallback,
        save_config_kwargs={"overwrite": True},
        parser_kwargs={"exit_on_error": False,  # main() prints argument errors as one line
                       "description": DESCRIPTION,
                       # not sys.argv[0]: the help cache is filled by `python -c` (make install)
                       "prog": "biomoe"},
        args=args,
    )
