"""Training guards as Lightning callbacks: non-finite loss/gradients, and router collapse.

Both only observe and decide; they use Lightning's hooks rather than changing the training step,
so they work the same for every strategy and can be switched off in the YAML. Neither makes the
host wait for the device in an ordinary step: they keep their evidence on the device and read it
every ``check_every_n_steps`` steps (and, for the NaN guard, before every checkpoint).
"""

from __future__ import annotations

import inspect
from typing import Any, Literal

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from biomoe.compat.torch import step_supports_amp_scaling
from biomoe.training.optimization.grad_norms import per_tensor_norms, step_grad_norms

__all__ = ["NonFiniteError", "NonFiniteGuard", "RouterCollapseMonitor"]


class NonFiniteError(RuntimeError):
    """Training produced NaN/inf. The message is one line: the step and where it was seen.

    The CLI prints it without a traceback (exit status 1): the useful facts are the step and the
    parameters, not Lightning's call stack.
    """


class NonFiniteGuard(L.Callback):
    """Detect non-finite loss or gradients, without making the host wait for the device each step.

    Every optimizer step, after backward and before gradient clipping and the update, the guard
    computes on the device whether the loss or any gradient is non-finite (one multi-tensor norm
    over the gradients: a NaN or inf in a gradient makes its norm non-finite). The host reads
    those flags only every ``check_every_n_steps`` steps, before every checkpoint is written, and
    at the end of training, so a NaN is reported at most ``check_every_n_steps`` steps late and
    never ends up in a checkpoint silently. What happens at a bad step:

    * On the device, with an optimizer that can skip an update by itself (torch's fused
      Adam/AdamW/SGD: ``_step_supports_amp_scaling``, the contract GradScaler uses), the guard hands
      it the flag as ``found_inf``: the update of a bad step is not applied (parameters, moments,
      weight decay and step count untouched) with no host sync. With ``action="stop"`` the flag
      latches, so no later update is applied either until the stop is raised.
    * ``action="stop"``: at the next look, raise :class:`NonFiniteError` naming the first bad step
      and the parameters whose gradients were non-finite. A checkpoint is never written after the
      bad step (the look before each save raises first); the last checkpoint on disk is from before.
      Without an optimizer that skips on the device, the bad update reaches the weights in memory
      for up to ``check_every_n_steps`` steps before the stop (the message then names the weights
      that became non-finite).
    * ``action="skip"``: the step's update is dropped and training continues; each skipped step is
      warned about (at the next look) and listed in :attr:`skipped_steps`. The step still counts
      (global step and LR schedule advance). After ``max_consecutive_skips`` bad steps in a row it
      stops anyway: persistent NaN means the run is broken, not unlucky. An optimizer that cannot
      skip on the device makes the guard look every step instead (one host sync per step) and drop
      the gradients itself.

    As a last line of defence it refuses to write a checkpoint whose weights are not finite
    (raising before the file is written; with atomic checkpoint I/O the previous one stays).
    Under sharded strategies every rank sees only its shard: the device flag that gates the update
    is max-reduced over ranks every step (no host sync), and each look OR-reduces the decision.
    """

    def __init__(self, action: Literal["stop", "skip"] = "stop", max_consecutive_skips: int = 10,
                 check_checkpoint: bool = True, check_every_n_steps: int = 50) -> None:
        if action not in ("stop", "skip"):
            raise ValueError(f"NonFiniteGuard action must be 'stop' or 'skip', got {action!r}")
        if check_every_n_steps < 1:
            raise ValueError(f"NonFiniteGuard check_every_n_steps must be >= 1, got {check_every_n_steps}")
        self.action = action
        self.max_consecutive_skips = max_consecutive_skips
        self.check_checkpoint = check_checkpoint
        self.check_every_n_steps = check_every_n_steps
        self.skipped_steps: list[int] = []
        self._loss_finite: Tensor | None = None
        self._consecutive = 0
        self._pending: list[_StepFlags] = []
        """Device flags of the optimizer steps since the host last looked."""
        self._latched: Tensor | None = None
        self._gated: list[torch.optim.Optimizer] = []
        self._last_look_step = -1

    # -- detection (device only) ----------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._pending.clear()
        self._latched = None
        self._last_look_step = trainer.global_step

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: Tensor) -> None:
        finite = torch.isfinite(loss.detach()).all()  # stays on device: no sync per micro-batch
        self._loss_finite = finite if self._loss_finite is None else self._loss_finite & finite

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        loss_finite, self._loss_finite = self._loss_finite, None
        named = [(name, p) for name, p in pl_module.named_parameters() if p.grad is not None]
        names = [name for name, _ in named]
        norms = step_grad_norms(pl_module, [p for _, p in named])  # shared with gradient clipping
        grad_bad = None if norms is None else ~torch.isfinite(norms)
        device = grad_bad.device if grad_bad is not None else (
            loss_finite.device if loss_finite is not None else pl_module.device)
        loss_bad = (~loss_finite).reshape(()) if loss_finite is not None else None
        bad = torch.zeros((), dtype=torch.bool, device=device)
        if grad_bad is not None and grad_bad.numel():
            bad = bad | grad_bad.any()
        if loss_bad is not None:
            bad = bad | loss_bad.to(device)
        gated = _skips_on_device(trainer, optimizer)
        if gated:
            bad = _max_over_ranks(trainer, bad)
            if self.action == "stop":  # nothing is applied from the first bad step until the stop
                self._latched = bad if self._latched is None else self._latched | bad
                flag = self._latched
            else:
                flag = bad
            optimizer.found_inf = flag.to(torch.float32)  # read by the fused kernel: skip if 1
            self._gated.append(optimizer)
        self._pending.append(_StepFlags(trainer.global_step, bad, loss_bad, grad_bad, names, gated))
        if not gated and self.action == "skip":
            self.look(trainer, pl_module, optimizer)  # must decide before the update: one sync per step

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        self._ungate()
        step = trainer.global_step
        if step != self._last_look_step and step % self.check_every_n_steps == 0:
            self.look(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._ungate()
        self.look(trainer, pl_module, can_log=False)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._ungate()

    def _ungate(self) -> None:
        for optimizer in self._gated:
            if hasattr(optimizer, "found_inf"):
                del optimizer.found_inf
        self._gated.clear()

    # -- the host looks -------------------------------------------------------------------------
    def look(self, trainer: L.Trainer, pl_module: L.LightningModule,
             optimizer: torch.optim.Optimizer | None = None, can_log: bool = True) -> None:
        """Read the flags of the steps since the last look (one device-to-host copy) and act on them."""
        self._last_look_step = trainer.global_step
        pending, self._pending = self._pending, []
        if not pending:
            return
        flags = torch.stack([p.bad.to(pending[0].bad.device) for p in pending]).cpu().tolist()
        if not trainer.strategy.reduce_boolean_decision(any(flags), all=False):
            self._consecutive = 0
            return
        if not any(flags):  # bad on another rank only (flags not reduced without on-device gating)
            flags = [False] * (len(flags) - 1) + [True]
        for entry, bad in zip(pending, flags):
            if not bad:
                self._consecutive = 0
                continue
            message = _describe(entry.step, entry.loss_was_bad(), entry.bad_names(), pl_module)
            if self.action == "stop":
                raise NonFiniteError(f"{message}; training stopped (NonFiniteGuard action=stop), "
                                     "no checkpoint was written after this step")
            self._consecutive += 1
            if self._consecutive > self.max_consecutive_skips:
                raise NonFiniteError(f"{message}; {self._consecutive} non-finite steps in a row, "
                                     "giving up (NonFiniteGuard max_consecutive_skips)")
            if not entry.gated and optimizer is not None:
                optimizer.zero_grad(set_to_none=True)  # AdamW then leaves these parameters alone
            self.skipped_steps.append(entry.step)
            rank_zero_warn(f"{message}; skipping this optimizer step (NonFiniteGuard action=skip)")
        if can_log and self.skipped_steps:
            pl_module.log("train/skipped_nonfinite_steps", torch.tensor(float(len(self.skipped_steps))),
                          rank_zero_only=True)  # a host tensor: logging it costs no device copy

    # -- checkpoints ----------------------------------------------------------------------------
    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        self.look(trainer, pl_module, can_log=False)  # a pending NaN stops before anything is written
        if not self.check_checkpoint:
            return
        items = [(key, _local(value)) for key, value in checkpoint.get("state_dict", {}).items()
                 if isinstance(value, Tensor) and value.is_floating_point()]
        per_tensor = nonfinite_per_tensor([v for _, v in items])
        bad = [] if per_tensor is None else [k for (k, _), b in zip(items, per_tensor.cpu().tolist()) if b]
        if trainer.strategy.reduce_boolean_decision(bool(bad), all=False):
            first = f": {', '.join(bad[:3])}" if bad else " on another rank"
            raise NonFiniteError(f"step {trainer.global_step}: refusing to write a checkpoint with "
                                 f"non-finite weights{first}")


class _StepFlags:
    """One optimizer step's device flags, read only when the host looks."""

    __slots__ = ("step", "bad", "loss_bad", "grad_bad", "names", "gated")

    def __init__(self, step: int, bad: Tensor, loss_bad: Tensor | None, grad_bad: Tensor | None,
                 names: list[str], gated: bool) -> None:
        self.step, self.bad, self.loss_bad, self.grad_bad = step, bad, loss_bad, grad_bad
        self.names, self.gated = names, gated

    def loss_was_bad(self) -> bool:
        return self.loss_bad is not None and bool(self.loss_bad)

    def bad_names(self) -> list[str]:
        if self.grad_bad is None:
            return []
        return [name for name, b in zip(self.names, self.grad_bad.cpu().tolist()) if b]


def nonfinite_per_tensor(tensors: list[Tensor]) -> Tensor | None:
    """Bool vector (on the first tensor's device): True where a tensor holds NaN or inf (or a norm
    beyond fp32, which clipping could not scale either); see
    :func:`~biomoe.training.optimization.grad_norms.per_tensor_norms`. No host synchronisation."""
    norms = per_tensor_norms(tensors)
    return None if norms is None else ~torch.isfinite(norms)


def _skips_on_device(trainer: L.Trainer, optimizer: torch.optim.Optimizer) -> bool:
    """The optimizer reads ``found_inf`` and skips its update when it is 1 (torch's fused kernels),
    and no GradScaler owns that attribute (fp16 mixed precision sets it itself)."""
    if not step_supports_amp_scaling(optimizer):
        return False
    if "grad_scaler" in inspect.signature(optimizer.step).parameters:
        return False  # the older protocol: the optimizer asks a GradScaler object instead
    return getattr(trainer.precision_plugin, "scaler", None) is None


def _max_over_ranks(trainer: L.Trainer, flag: Tensor) -> Tensor:
    """OR of a device flag over all ranks, as a collective on the device (no host sync)."""
    if trainer.world_size <= 1 or not (dist.is_available() and dist.is_initialized()):
        return flag
    as_int = flag.to(torch.int32)
    dist.all_reduce(as_int, op=dist.ReduceOp.MAX)
    return as_int.bool()


def _local(tensor: Tensor) -> Tensor:
    """The local shard of a DTensor (no communication), or the tensor itself."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def _describe(step: int, loss_bad: bool, grad_names: list[str], pl_module: L.LightningModule) -> str:
    what = "non-finite loss" if loss_bad else "finite loss"
    if grad_names:
        shown = ", ".join(grad_names[:3]) + (f" (+{len(grad_names) - 3} more)" if len(grad_names) > 3 else "")
        what += f", non-finite gradients in {shown}"
    elif loss_bad:
        what += " (gradients finite)"
    weights = [n for n, p in pl_module.named_parameters() if not bool(torch.isfinite(_local(p.detach())).all())]
    if weights:
        what += f"; weights already non-finite in {', '.join(weights[:3])}"
    return f"step {step}: {what}"


class RouterCollapseMonitor(L.Callback):
    """Warn when an expert's share of routed tokens stays below ``threshold`` for ``patience`` checks.

    A collapsed router sends (almost) nothing to some experts: their parameters stop learning
    and the model silently has fewer experts than configured. Load-balancing losses usually
    prevent it, so when it happens the user needs to know which layer and expert.

    Counts come from a forward hook on every MoE layer's router (``RoutingResult.tokens_per_expert``
    of the local tokens, training mode only), accumulated on the device and read every
    ``check_every_n_steps`` steps — one host sync per check. ``threshold`` is a fraction of all
    routed (token, slot) assignments, so fractions over experts sum to 1 (uniform = 1/E). The
    warning repeats for an expert only after it has recovered in between.
    """

    def __init__(self, threshold: float = 0.02, patience: int = 5, check_every_n_steps: int = 10) -> None:
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"RouterCollapseMonitor threshold must be in (0, 1), got {threshold}")
        if patience < 1 or check_every_n_steps < 1:
            raise ValueError("RouterCollapseMonitor patience and check_every_n_steps must be >= 1")
        self.threshold = threshold
        self.patience = patience
        self.check_every_n_steps = check_every_n_steps
        self.streaks: dict[int, list[int]] = {}
        """Per MoE layer (block index): consecutive checks each expert has been under threshold."""
        self.warned: set[tuple[int, int]] = set()
        self._counts: dict[int, Tensor] = {}
        self._handles: list[Any] = []
        self._last_checked_step = 0
        """Global step of the last check: with gradient accumulation several micro-batches end at
        the same global step, and each check must cover (and count as) one optimizer step."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # on_train_start, not on_fit_start: fast-path swaps of the router happen in the module's
        # on_fit_start, which runs after callbacks' on_fit_start.
        self._remove_hooks()
        self._last_checked_step = trainer.global_step  # a resumed run has checked this step already
        model = getattr(pl_module, "model", pl_module)
        for idx, block in enumerate(getattr(model, "blocks", [])):
            router = getattr(getattr(block, "mlp", None), "router", None)
            if router is not None:
                self._handles.append(router.register_forward_hook(self._hook(idx)))

    def _hook(self, layer: int):
        # Eager even inside compiled blocks: traced, each layer's closure and the growing dict of
        # counts would be new guards, one recompilation per layer until torch's limit.
        @torch.compiler.disable
        def record(module: torch.nn.Module, args: Any, out: Any) -> None:
            counts = getattr(out, "tokens_per_expert", None)
            if counts is None or not module.training:
                return
            counts = _local(counts).detach().float()
            prev = self._counts.get(layer)
            self._counts[layer] = counts.clone() if prev is None else prev + counts

        return record

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if step != self._last_checked_step and step % self.check_every_n_steps == 0 and self._counts:
            self._last_checked_step = step
            self.check(step)

    def check(self, step: int) -> list[tuple[int, int, float]]:
        """Update streaks from the counts since the last check; returns the new warnings."""
        warnings: list[tuple[int, int, float]] = []
        layers = sorted(self._counts)
        tensors = [self._counts[layer].reshape(-1) for layer in layers]
        host = torch.cat([t.to(tensors[0].device) for t in tensors]).cpu().split(
            [t.numel() for t in tensors]) if tensors else []  # one device-to-host copy per check
        for layer, counts in zip(layers, host):
            total = float(counts.sum())
            if total <= 0:
                continue
            fractions = (counts / total).tolist()
            streak = self.streaks.setdefault(layer, [0] * len(fractions))
            for expert, frac in enumerate(fractions):
                if frac < self.threshold:
                    streak[expert] += 1
                    if streak[expert] >= self.patience and (layer, expert) not in self.warned:
                        self.warned.add((layer, expert))
                        warnings.append((layer, expert, frac))
                else:
                    streak[expert] = 0
                    self.warned.discard((layer, expert))
        self._counts.clear()
        for layer, expert, frac in warnings:
            rank_zero_warn(
                f"router collapse at step {step}: layer {layer} expert {expert} received "
                f"{frac:.2%} of routed tokens, under threshold {self.threshold:.2%} for "
                f"{self.patience} consecutive checks (every {self.check_every_n_steps} steps); "
                "consider a larger aux_loss_coef or router_bias_update_rate")
        return warnings

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._remove_hooks()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._remove_hooks()

    def _remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    # Streaks survive resume, so patience counts across a restart.
    def state_dict(self) -> dict[str, Any]:
        return {"streaks": {str(k): list(v) for k, v in self.streaks.items()},
                "warned": [list(x) for x in sorted(self.warned)]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.streaks = {int(k): list(v) for k, v in state_dict.get("streaks", {}).items()}
        self.warned = {(int(a), int(b)) for a, b in state_dict.get("warned", [])}

