"""Private Transformer Engine internals biomoe relies on. Tested with TE 2.20.2.

biomoe's expert backends feed TE modules the model's own stacked expert weights instead of
weights the TE modules own (so checkpoints stay backend-independent). TE has no public way to do
that, so this module:

- drops a module's own weight parameters (``_parameters``);
- names the ``GroupedLinear`` method that supplies the per-GEMM weights (``WEIGHT_TENSORS_HOOK``),
  which ``StackedGroupedLinear`` overrides;
- installs per-call weights into a ``te.ops.Sequential``'s fusers (their basic-op parameter lists)
  and reads which fused ops ran.
"""

from __future__ import annotations

import sys
from typing import Any

TESTED_WITH = ("2.20.2",)

WEIGHT_TENSORS_HOOK = "_get_weight_tensors"
"""``te.GroupedLinear`` method returning the list of per-GEMM weights."""


def fp8_recipe_active() -> bool:
    """True inside TE's FP8 autocast. Never imports TE: if it is not loaded, no recipe is active."""
    te_quantization = sys.modules.get("transformer_engine.pytorch.quantization")
    return te_quantization is not None and bool(te_quantization.FP8GlobalStateManager.is_fp8_enabled())


def drop_parameters(module: Any, names: list[str]) -> None:
    for name in names:
        del module._parameters[name]


def fusers(sequential: Any) -> list[Any]:
    """The ``OperationFuser`` groups of a ``te.ops.Sequential`` (built now if not yet)."""
    from transformer_engine.pytorch.ops.fuser import OperationFuser  # optional dependency

    groups = sequential._module_groups
    if groups is None:
        groups = sequential._module_groups = sequential._make_module_groups(sequential._modules.values())
    return [g for g in groups if isinstance(g, OperationFuser)]


def set_fuser_parameters(fuser: Any, params_for: dict[int, list[Any]]) -> None:
    """Make ``params_for[id(op)]`` the parameters the fuser hands its autograd function for each
    basic op (ops not named get none)."""
    fuser._basic_op_params = [params_for.get(id(op), []) for op in fuser._basic_ops]
    fuser._basic_op_num_params = [len(p) for p in fuser._basic_op_params]
    fuser._flat_basic_op_params = sum(fuser._basic_op_params, [])


def forward_op_names(fuser: Any) -> list[str]:
    """Class names of the (possibly fused) ops the fuser ran in its last forward."""
    return [type(op).__name__ for op, _ in fuser._forward_ops]
