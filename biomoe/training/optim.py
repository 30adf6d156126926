"""AdamW that keeps fp32 master weights in the optimizer, so the model computes in bf16.

With ``trainer.precision: bf16-true`` the parameters (and their gradients) are bf16: every
matmul reads bf16 weights directly instead of autocast casting fp32 weights at each op, in the
forward and again in the backward. Applying updates to bf16 weights would round small updates
away (bf16 keeps 8 significant bits), so the update is computed on fp32 copies held in the
optimizer state and the result is copied back into the bf16 parameters after each step — the
recipe Megatron-LM and Transformer Engine's ``FusedAdam(master_weights=True)`` use, written on
torch's own fused/foreach AdamW kernels so that it runs on CPU too and works with FSDP2's
DTensor shards.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim.adamw import adamw

from biomoe.backends.te.availability import te_installed, te_usable
from biomoe.compat.torch import foreach_copy_
from biomoe.errors import ConfigError

MASTER_STATE = ("master", "exp_avg", "exp_avg_sq")


class AdamWWithMasterWeights(torch.optim.Optimizer):
    """Decoupled-weight-decay Adam on fp32 master copies of (low-precision) parameters.

    Numerically the same as ``torch.optim.AdamW`` on fp32 parameters: the master copies are what
    an fp32 run's parameters would be; the model's bf16 parameters are their rounding.
    Checkpoints hold the masters and both moments in fp32 (torch's loader would otherwise cast
    them to the parameters' bf16), so a resumed run continues exactly.
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, *, fused: bool | None = None,
                 foreach: bool | None = None, master_dtype: torch.dtype = torch.float32) -> None:
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay})
        self.fused = bool(fused)
        self.foreach = foreach
        self.master_dtype = master_dtype
        # As torch's fused AdamW: step() reads ``grad_scale`` (gradients are divided by it inside the
        # kernel: how clipping and GradScaler hand over their factor) and ``found_inf`` (skip).
        self._step_supports_amp_scaling = self.fused

    def _state_for(self, param: Tensor) -> dict[str, Tensor]:
        state = self.state[param]
        if not state:
            master = param.detach().to(self.master_dtype, copy=True)
            # torch's fused AdamW wants the step count on the parameters' device, the others on CPU.
            step_device = param.device if self.fused else torch.device("cpu")
            state["step"] = torch.zeros((), dtype=torch.float32, device=step_device)
            state["master"] = master
            state["exp_avg"] = torch.zeros_like(master, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(master, memory_format=torch.preserve_format)
        return state

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            states = [self._state_for(p) for p in params]
            masters = [s["master"] for s in states]
            grads = [p.grad.to(self.master_dtype) for p in params]
            beta1, beta2 = group["betas"]
            scaling = {"grad_scale": getattr(self, "grad_scale", None),
                       "found_inf": getattr(self, "found_inf", None)} if self.fused else {}
            adamw(masters, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], [],
                  [s["step"] for s in states], foreach=self.foreach, fused=self.fused or None,
                  amsgrad=False, beta1=beta1, beta2=beta2, lr=group["lr"],
                  weight_decay=group["weight_decay"], eps=group["eps"], maximize=False, **scaling)
            foreach_copy_(params, masters)  # one rounding to the parameters' dtype, one kernel per group
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """As torch's, but the masters and moments stay in ``master_dtype`` (torch's loader casts
        every floating state tensor to its parameter's dtype)."""
        saved = {index: {k: v for k, v in entry.items() if k in MASTER_STATE}
                 for index, entry in state_dict["state"].items()}
        super().load_state_dict(state_dict)
        saved_ids = [i for group in state_dict["param_groups"] for i in group["params"]]
        params = [p for group in self.param_groups for p in group["params"]]
        step_device = None if self.fused else torch.device("cpu")  # as _state_for places it
        for index, param in zip(saved_ids, params):
            for key, value in saved.get(index, {}).items():
                if isinstance(value, Tensor):
                    self.state[param][key] = value.to(device=param.device, dtype=self.master_dtype)
            step = self.state[param].get("step")
            if isinstance(step, Tensor):
                self.state[param]["step"] = step.to(device=step_device or param.device, dtype=torch.float32)


def wants_master_weights(params: Iterable[Tensor], setting: bool | None) -> bool:
    """``None`` (the default) = whenever some trainable parameter is stored below fp32."""
    if setting is not None:
        return setting
    return any(p.dtype in (torch.bfloat16, torch.float16) for p in params if p.requires_grad)


def master_weight_adamw(groups: list[dict[str, Any]], *, lr: float, betas: tuple[float, float], eps: float,
                        backend: str, moment_dtype: str, device: torch.device, fused: bool) -> torch.optim.Optimizer:
    """The AdamW that keeps fp32 master weights: TE's fused kernel on a CUDA device where it is
    installed (``backend`` auto or te), else :class:`AdamWWithMasterWeights`.

    Raises :class:`~biomoe.errors.ConfigError` for a choice this machine cannot run, rather than silently
    falling back (``backend: te`` without TE or CUDA, bf16 moments on the torch path).
    """
    te_ok = te_usable(device)
    if backend == "te" and not te_ok:
        raise ConfigError("model.optim.backend: te needs Transformer Engine and the parameters on a CUDA "
                          f"device (here: {device.type}, transformer_engine "
                          f"{'installed' if te_installed() else 'not installed'}); use auto or torch")
    if backend == "te" or (backend == "auto" and te_ok):
        from biomoe.backends.te.optim import TEAdamWWithMasterWeights  # optional dependency: imports TE

        return TEAdamWWithMasterWeights(groups, lr=lr, betas=betas, eps=eps, moment_dtype=moment_dtype)
    if moment_dtype != "fp32":
        raise ConfigError(f"model.optim.moment_dtype: {moment_dtype} needs model.optim.backend te "
                          "(Transformer Engine's FusedAdam on a CUDA device); use fp32 here")
    return AdamWWithMasterWeights(groups, lr=lr, betas=betas, eps=eps, fused=fused)
