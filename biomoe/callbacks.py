"""Old path of :mod:`biomoe.training.callbacks`, kept so configs that name
``biomoe.callbacks.NonFiniteGuard`` or ``biomoe.callbacks.RouterCollapseMonitor`` still load
(with a one-line warning; :mod:`biomoe.training.old_paths` says how)."""

from biomoe.training.old_paths import forward_names

__getattr__ = forward_names(__name__, "biomoe.training.callbacks",
                            ("NonFiniteError", "NonFiniteGuard", "RouterCollapseMonitor"))
