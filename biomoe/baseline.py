"""Old path of :mod:`biomoe.training.markov_baseline`, kept so configs that name
``biomoe.baseline.MarkovBaseline`` still load (with a one-line warning;
:mod:`biomoe.training.old_paths` says how)."""

from biomoe.training.old_paths import forward_names

__getattr__ = forward_names(__name__, "biomoe.training.markov_baseline", ("EvaluationPassCallback", "MarkovBaseline"))
