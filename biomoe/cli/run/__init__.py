"""The bookkeeping of a ``fit``/``validate``/``test``/``predict`` run, which only the command line does.

The LightningModule, optimizers and callbacks that train live in :mod:`biomoe.training` and work
under any Trainer; what is here reads the parsed command and looks after the run around them:

* :mod:`~biomoe.cli.run.config_values` — the one reader of a parsed jsonargparse configuration;
* :mod:`~biomoe.cli.run.config_checks` — every value range-checked before anything is built;
* :mod:`~biomoe.cli.run.folders` — where a run writes and where its checkpoints are found;
* :mod:`~biomoe.cli.run.resume` — which checkpoint ``fit`` resumes, and only its own run's;
* :mod:`~biomoe.cli.run.trainer_setup` — what is set up around every Trainer (loggers' packages,
  start-up messages, matmul precision, progress bar, model summary);
* :mod:`~biomoe.cli.run.memory_check` — a config that cannot fit in memory stops before it starts;
* :mod:`~biomoe.cli.run.validation_note` — a run whose validation measures little or nothing says so;
* :mod:`~biomoe.cli.run.progress_lines` — a progress line every few seconds where no bar runs;
* :mod:`~biomoe.cli.run.summary` — what ``fit`` reports when it ends.
"""
