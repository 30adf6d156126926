"""Old path of :mod:`biomoe.training.repeat_mixture`, kept so configs that name
``biomoe.repeat_metric.RepeatMixture`` still load (with a one-line warning;
:mod:`biomoe.training.old_paths` says how)."""

from biomoe.training.old_paths import forward_names

__getattr__ = forward_names(__name__, "biomoe.training.repeat_mixture", ("RepeatMixture",))
