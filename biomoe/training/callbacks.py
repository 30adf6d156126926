"""Training guards as Lightning callbacks: non-finite loss/gradients, and router collapse.

Both only observe and decide; they use Lightning's hooks rather than changing the training step,
so they work the same for every strategy and can be switched off in the YAML.
"""

from __future__ import annotations

from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

__all__ = ["NonFiniteError", "NonFiniteGuard", "RouterCollapseMonitor"]


class NonFiniteError(RuntimeError):
    """Training produced NaN/inf. The message is one line: the step and where it was seen.

    The CLI prints it without a traceback (exit status 1): the useful facts are the step and the
    parameters, not Lightning's call stack.
    """


class NonFiniteGuard(L.Callback):
    """Detect non-finite loss or gradients before the optimizer applies them.

    Checked in ``on_before_optimizer_step`` — after backward, before gradient clipping and the
    update — so a bad step never reaches the weights:

    * ``action="stop"``: raise :class:`NonFiniteError` naming the step and the first parameters
      with non-finite gradients. Training ends before ``on_train_batch_end``, so ModelCheckpoint
      never saves after the bad step; the last checkpoint on disk is from before it.
    * ``action="skip"``: drop the gradients (set to ``None``: AdamW then leaves those parameters,
      their moments and weight decay untouched), warn, and continue. The step still counts
      (global step and LR schedule advance). After ``max_consecutive_skips`` bad steps in a row
      it stops anyway: persistent NaN means the run is broken, not unlucky.

    As a last line of defence it refuses to write a checkpoint whose weights are not finite
    (raising before the file is written; with atomic checkpoint I/O the previous one stays).
    Under sharded strategies every rank sees only its shard, so the decision is OR-reduced over
    ranks (one boolean all-reduce per step) to keep ranks in step.
    """

    def __init__(self, action: Literal["stop", "skip"] = "stop", max_consecutive_skips: int = 10,
                 check_checkpoint: bool = True) -> None:
        if action not in ("stop", "skip"):
            raise ValueError(f"NonFiniteGuard action must be 'stop' or 'skip', got {action!r}")
        self.action = action
        self.max_consecutive_skips = max_consecutive_skips
        self.check_checkpoint = check_checkpoint
        self.skipped_steps: list[int] = []
        self._loss_finite: Tensor | None = None
        self._consecutive = 0

    # -- detection ------------------------------------------------------------------------------
    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: Tensor) -> None:
        finite = torch.isfinite(loss.detach()).all()  # stays on device: no sync per micro-batch
        self._loss_finite = finite if self._loss_finite is None else self._loss_finite & finite

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        loss_finite, self._loss_finite = self._loss_finite, None
        grads = [(name, p.grad) for name, p in pl_module.named_parameters() if p.grad is not None]
        flags = [torch.isfinite(_local(g)).all() for _, g in grads]
        if loss_finite is not None:
            flags.append(loss_finite)
        local_bad = bool(flags) and not bool(torch.stack([f.to(flags[0].device) for f in flags]).all())
        bad = trainer.strategy.reduce_boolean_decision(local_bad, all=False)
        if not bad:
            self._consecutive = 0
            return
        step = trainer.global_step
        loss_bad = loss_finite is not None and not bool(loss_finite)
        where = [name for name, g in grads if not bool(torch.isfinite(_local(g)).all())]
        message = _describe(step, loss_bad, where, pl_module)
        if self.action == "stop":
            raise NonFiniteError(f"{message}; training stopped (NonFiniteGuard action=stop), "
                                 "no checkpoint was written after this step")
        self._consecutive += 1
        if self._consecutive > self.max_consecutive_skips:
            raise NonFiniteError(f"{message}; {self._consecutive} non-finite steps in a row, "
                                 "giving up (NonFiniteGuard max_consecutive_skips)")
        optimizer.zero_grad(set_to_none=True)
        self.skipped_steps.append(step)
        rank_zero_warn(f"{message}; skipping this optimizer step (NonFiniteGuard action=skip)")
        pl_module.log("train/skipped_nonfinite_steps", float(len(self.skipped_steps)), rank_zero_only=True)

    # -- checkpoints ----------------------------------------------------------------------------
    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        if not self.check_checkpoint:
            return
        bad = [key for key, value in checkpoint.get("state_dict", {}).items()
               if isinstance(value, Tensor) and value.is_floating_point()
               and not bool(torch.isfinite(_local(value)).all())]
        if trainer.strategy.reduce_boolean_decision(bool(bad), all=False):
            first = f": {', '.join(bad[:3])}" if bad else " on another rank"
            raise NonFiniteError(f"step {trainer.global_step}: refusing to write a checkpoint with "
                                 f"non-finite weights{first}")


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
        for layer, counts in sorted(self._counts.items()):
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

