"""Transformer Engine fast path (GPU only).

Nothing here imports Transformer Engine at module import time: ``import biomoe`` and the CPU test
suite must work on machines without TE or CUDA. Each submodule has one job:

- :mod:`availability` — is TE importable, what GPU and compute capability are we on;
- :mod:`precision` — precision names → TE recipes, the start-up capability check, ``te.autocast``;
- :mod:`experts` — the ``te`` / ``te_fused`` expert backends and the ``auto`` resolver;
- :mod:`dispatch` — token permutation with TE's ``moe_permute`` / ``moe_unpermute``;
- :mod:`router` — TE's fused top-k router behind the :class:`~biomoe.model.moe.router.TopKRouter` API;
- :mod:`layers` — TE RMSNorm and DotProductAttention swapped in without changing state_dict keys;
- :mod:`optim` — TE's ``FusedAdam`` as the fp32-master-weight AdamW on a CUDA device (the one
  submodule that imports TE at import, so it is imported only when that optimizer is used).

Which of these a run uses is chosen once, before the model is built, outside this package
(:mod:`biomoe.backends`).
"""
