"""Old path of :mod:`biomoe.training.time_budget`, kept so configs that name
``biomoe.time_budget.TimeBudget`` still load (with a one-line warning;
:mod:`biomoe.training.old_paths` says how)."""

from biomoe.training.old_paths import forward_names

__getattr__ = forward_names(__name__, "biomoe.training.time_budget", ("TimeBudget",))
