"""How the weights move: where they start, how each step updates them, and their moving average.

The AdamW that keeps fp32 master weights (:mod:`~biomoe.training.optimization.master_adamw`, its
compiled twin :mod:`~biomoe.training.optimization.compiled_adamw`, and the choice between them,
:mod:`~biomoe.training.optimization.optimizer_choice`), the gradient norms one step computes once for
clipping and the non-finite guard (:mod:`~biomoe.training.optimization.grad_norms`), the learning-rate
schedule (:mod:`~biomoe.training.optimization.lr_schedule`), the weights' EMA
(:mod:`~biomoe.training.optimization.ema`) and the start from another run's weights
(:mod:`~biomoe.training.optimization.init_weights`). Nothing here imports the rest of training.
"""
