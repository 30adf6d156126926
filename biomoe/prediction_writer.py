"""Old path of :mod:`biomoe.training.prediction_writer`, kept so configs that name
``biomoe.prediction_writer.WindowScoreWriter`` still load (with a one-line warning;
:mod:`biomoe.training.old_paths` says how)."""

from biomoe.training.old_paths import forward_names

__getattr__ = forward_names(__name__, "biomoe.training.prediction_writer", ("WindowScoreWriter",))
