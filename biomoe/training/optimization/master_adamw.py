"""AdamW that keeps fp32 master weights in the optimizer, so the model computes in bf16.

With ``trainer.precision: bf16-true`` the parameters (and their gradients) are bf16: every
matmul reads bf16 weights directly instead of autocast casting fp32 weights at each op, in the
forward and again in the backward. Applying updates to bf16 weights would round small updates
away (bf16 keeps 8 significant bits), so the update is computed on fp32 copies held in the
optimizer state and the result is copied back into the bf16 parameters after each step — the
recipe Megatron-LM and Transformer Engine's ``FusedAdam(master_weights=True)`` use, written on
torch's own fused/foreach AdamW kernels so that it runs on CPU too and works with FSDP2's
DTensor shards.

Two settings trade optimizer memory: ``master_storage="remainder"`` keeps of each fp32 master only
the 16 bits its bf16 weight lacks (the master is then the weight plus that remainder, exactly: see
:mod:`biomoe.checkpoint.optimizer_state`), and ``moment_dtypes`` stores the first and second
moments in bf16 where asked (the update is still computed in fp32). Per parameter the state is
then as little as 2 + 4 bytes instead of 4 + 8.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim.adamw import adamw

from biomoe.checkpoint.optimizer_state import MASTER_STORAGES, join_master, local_shard, split_master
from biomoe.compat.torch import foreach_copy_

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
                 foreach: bool | None = None, master_dtype: torch.dtype = torch.float32,
                 master_storage: str = "fp32",
                 moment_dtypes: tuple[torch.dtype, torch.dtype] = (torch.float32, torch.float32)) -> None:
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay})
        if master_storage not in MASTER_STORAGES:
            raise ValueError(f"master_storage: {master_storage!r} is not one of {', '.join(MASTER_STORAGES)}")
        self.fused = bool(fused)
        self.foreach = foreach
        self.master_dtype = master_dtype
        self.master_storage = master_storage
        self.moment_dtypes = tuple(moment_dtypes)
        # As torch's fused AdamW: step() reads ``grad_scale`` (gradients are divided by it inside the
        # kernel: how clipping and GradScaler hand over their factor) and ``found_inf`` (skip).
        self._step_supports_amp_scaling = self.fused

    def _keeps_remainder(self, param: Tensor) -> bool:
        """Remainders encode an fp32 master beside a bf16 weight only; others keep a full master."""
        return (self.master_storage == "remainder" and param.dtype == torch.bfloat16
                and self.master_dtype == torch.float32)

    def _state_for(self, param: Tensor) -> dict[str, Tensor]:
        state = self.state[param]
        if not state:
            # torch's fused AdamW wants the step count on the parameters' device, the others on CPU.
            step_device = param.device if self.fused else torch.device("cpu")
            state["step"] = torch.zeros((), dtype=torch.float32, device=step_device)
            if self._keeps_remainder(param):
                state["remainder"] = torch.zeros_like(param.detach(), dtype=torch.int16)
            else:
                state["master"] = param.detach().to(self.master_dtype, copy=True)
            for key, dtype in zip(("exp_avg", "exp_avg_sq"), self._moment_storage()):
                state[key] = torch.zeros_like(param.detach(), dtype=dtype, memory_format=torch.preserve_format)
        return state

    def _moment_storage(self) -> tuple[torch.dtype, torch.dtype]:
        """The stored dtypes of (exp_avg, exp_avg_sq): as asked, fp32 ones follow ``master_dtype``."""
        return tuple(self.master_dtype if d == torch.float32 else d for d in self.moment_dtypes)

    def master(self, param: Tensor) -> Tensor:
        """The fp32 master of ``param`` (joined from its remainder where only that is stored)."""
        state = self._state_for(param)
        if "remainder" in state:
            return join_master(param.detach(), state["remainder"])
        return state["master"]

    def _store_remainder(self, param: Tensor, master: Tensor) -> None:
        """Write an updated master back as its bf16 weight (into the parameter) and remainder."""
        weight, remainder = split_master(master)
        local_shard(self.state[param]["remainder"]).copy_(local_shard(remainder))
        local_shard(param.data).copy_(local_shard(weight))

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                self.update_group(group, params, [self._state_for(p) for p in params])
        return loss

    def update_group(self, group: dict[str, Any], params: list[Tensor], states: list[dict[str, Tensor]]) -> None:
        """The update of one parameter group's ``params`` (those with a gradient) and their states."""
        masters = [self.master(p) for p in params]  # the full ones in place, joined ones fresh
        grads = [p.grad.to(self.master_dtype) for p in params]
        # bf16 moments are updated in fp32 and rounded back, as TE's kernel does in registers.
        exp_avgs = [s["exp_avg"].to(self.master_dtype) for s in states]
        exp_avg_sqs = [s["exp_avg_sq"].to(self.master_dtype) for s in states]
        beta1, beta2 = group["betas"]
        scaling = {"grad_scale": getattr(self, "grad_scale", None),
                   "found_inf": getattr(self, "found_inf", None)} if self.fused else {}
        adamw(masters, grads, exp_avgs, exp_avg_sqs, [],
              [s["step"] for s in states], foreach=self.foreach, fused=self.fused or None,
              amsgrad=False, beta1=beta1, beta2=beta2, lr=group["lr"],
              weight_decay=group["weight_decay"], eps=group["eps"], maximize=False, **scaling)
        first, second = self._moment_storage()
        if first != self.master_dtype:
            foreach_copy_([s["exp_avg"] for s in states], exp_avgs)
        if second != self.master_dtype:
            foreach_copy_([s["exp_avg_sq"] for s in states], exp_avg_sqs)
        full = [(p, m) for p, m, s in zip(params, masters, states) if "remainder" not in s]
        if full:
            foreach_copy_([p for p, _ in full], [m for _, m in full])  # one rounding, one kernel
        for p, m, s in zip(params, masters, states):
            if "remainder" in s:
                self._store_remainder(p, m)

    def state_dict(self) -> dict[str, Any]:
        """torch's, with every master as a full fp32 tensor (remainders joined): the portable layout."""
        state_dict = super().state_dict()
        params = [p for group in self.param_groups for p in group["params"]]
        saved_ids = [i for group in state_dict["param_groups"] for i in group["params"]]
        for index, param in zip(saved_ids, params):
            entry = state_dict["state"].get(index)
            if entry is not None and "remainder" in entry:
                entry = dict(entry)
                del entry["remainder"]
                entry["master"] = self.master(param)
                state_dict["state"][index] = entry
        return state_dict

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """As torch's, but the masters stay in ``master_dtype`` and the moments in ``moment_dtypes``
        (torch's loader casts every floating state tensor to its parameter's dtype). Where only
        remainders are kept, the saved master is split again, and the weight set from it."""
        saved = {index: {k: v for k, v in entry.items() if k in MASTER_STATE}
                 for index, entry in state_dict["state"].items()}
        super().load_state_dict(state_dict)
        saved_ids = [i for group in state_dict["param_groups"] for i in group["params"]]
        params = [p for group in self.param_groups for p in group["params"]]
        step_device = None if self.fused else torch.device("cpu")  # as _state_for places it
        stored = dict(zip(("exp_avg", "exp_avg_sq"), self._moment_storage()), master=self.master_dtype)
        for index, param in zip(saved_ids, params):
            state = self.state[param]
            for key, value in saved.get(index, {}).items():
                if isinstance(value, Tensor):
                    state[key] = value.to(device=param.device, dtype=stored[key])
            if "master" in state and self._keeps_remainder(param):
                state["remainder"] = torch.zeros_like(param.detach(), dtype=torch.int16)
                self._store_remainder(param, state.pop("master").to(torch.float32))
            step = self.state[param].get("step")
            if isinstance(step, Tensor):
                self.state[param]["step"] = step.to(device=step_device or param.device, dtype=torch.float32)
