"""Training: the LightningModule, its optimizers, and the callbacks that report on a run and guard it.

Four subpackages, each with one job, layered so that each imports only those below it:

* :mod:`~biomoe.training.step`: the LightningModule and what one step computes (loss, held-out
  metrics, the training clock, the state an exact resume needs), and the step as one CUDA graph;
* :mod:`~biomoe.training.guards`: callbacks that keep a run within its length and time, watch its
  health (non-finite values, router collapse), and decide what it leaves on disk (the best
  checkpoint, a resumable one when it is stopped);
* :mod:`~biomoe.training.optimization`: how the weights move: where they start, the AdamW variants,
  gradient norms and clipping, the learning-rate schedule, and their moving average;
* :mod:`~biomoe.training.reports`: callbacks and files that measure and report a run: baselines
  beside the network's bits/base, per-genome metrics, the logged history, plots and predictions.

``step`` and ``guards`` use ``optimization`` and ``reports``; neither of those imports back. The
module paths these classes had before (``biomoe.training.ema``, ...) still load in configs
(:mod:`biomoe.training.old_paths`).
"""
