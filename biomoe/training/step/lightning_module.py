"""The LightningModule: loss, metrics, optimizer and schedule around a plain MoETransformer."""

from __future__ import annotations

import math
import time
from typing import Any

import lightning as L
import torch
from lightning.pytorch.core.optimizer import LightningOptimizer
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor
from torch.distributed.tensor import DTensor
from torchmetrics import MeanMetric

from biomoe.build import BuiltModel, build_model
from biomoe.data.document_offsets import batch_documents
from biomoe.compat.lightning import attached_trainer, logs_this_step
from biomoe.model.config import ConfigError, ModelConfig, OptimConfig, RuntimeConfig
from biomoe.model.documents import DocumentLayout
from biomoe.model.losses import LN2, masked_cross_entropy_sum, per_position_log_likelihood
from biomoe.model.moe.router import router_entropy
from biomoe.model.transformer import MoETransformer
from biomoe.training.optimization.grad_norms import clip_grad_norm_shared, drop_grad_scale, forget_step_grad_norms
from biomoe.training.optimization.lr_schedule import warmup_cosine
from biomoe.training.optimization.optimizer_choice import master_weight_adamw, wants_master_weights
from biomoe.training.reports.genome_metrics import genome_step_outputs
from biomoe.training.step.held_out_metric import Fp32MeanMetric
from biomoe.training.step.resume_state import CHECKPOINT_KEY, collect_resume_state, restore_resume_state
from biomoe.training.step.sequence_lengths import SequenceLengthWatch, watches_sequence_lengths
from biomoe.training.step.training_clock import TrainingClock


class BioMoEModule(L.LightningModule):
    """Trains an MoE decoder on nucleotide windows.

    Loss = masked next-token cross-entropy + ``aux_loss_coef``·aux + ``z_loss_coef``·z.
    The model is built in :meth:`configure_model` by :func:`biomoe.build.build_model`, so that
    strategies (FSDP2, expert parallel) can build it on the right device and shard it before
    weights are materialised.
    """

    def __init__(self, config: ModelConfig | None = None, optim: OptimConfig | None = None,
                 runtime: RuntimeConfig | None = None, log_expert_load_every_n_steps: int = 50) -> None:
        """
        Args:
            config: what the model is (its shape); recorded in checkpoints.
            optim: AdamW, weight decay, LR schedule and master weights.
            runtime: how it runs (precision recipe, TE or torch kernels, compile, activation
                checkpointing); changes no parameter, so it may differ between training and use.
            log_expert_load_every_n_steps: how often per-expert load fractions are logged.
        """
        super().__init__()
        self.config = config or ModelConfig()
        self.optim = optim or OptimConfig()
        self.runtime = runtime or RuntimeConfig()
        self.log_expert_load_every_n_steps = log_expert_load_every_n_steps
        self.save_hyperparameters()
        self.model: MoETransformer | None = None
        self.val_ce = Fp32MeanMetric()  # fp32 sums under bf16-true too
        self.test_ce = Fp32MeanMetric()
        self._clock = TrainingClock()  # training time between logging steps, validation left out
        self._tokens_since_log = 0
        self._step_seen = -1
        self._last_loss: Tensor | None = None
        self.built: BuiltModel | None = None
        self._lengths = SequenceLengthWatch(active=False)  # set where the device is known

    # ----------------------------------------------------------------------------------- model
    def configure_model(self) -> None:
        """Build the model with :func:`biomoe.build.build_model` (once). A model assigned to
        ``self.model`` beforehand (e.g. with given weights) is parallelised as it is."""
        if self.built is not None:
            return
        trainer = attached_trainer(self)  # None outside a Trainer (``self.trainer`` would raise)
        strategy = trainer.strategy if trainer is not None else None
        device = strategy.root_device if strategy is not None else self.device
        # A strategy that shards (expert parallel + FSDP2) hands over its layout; the model is
        # then built, split and sharded in one place before weights are materialised.
        plan_for = getattr(strategy, "parallel_plan", None)
        self._lengths = SequenceLengthWatch(watches_sequence_lengths(self.config, self.runtime, device))
        self.built = build_model(self.config, self.runtime, device,
                                 plan=plan_for() if plan_for is not None else None,
                                 announce=rank_zero_info,
                                 trainer_precision=str(trainer.precision) if trainer is not None else None,
                                 model=self.model)
        self.model = self.built.model

    def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        """Clip from the norms this step already computed (:mod:`biomoe.training.optimization.grad_norms`).

        A strategy whose gradients live on several device meshes clips them itself (torch's
        ``clip_grad_norm_``, used by Lightning, cannot combine such DTensors). Without a GradScaler
        (bf16 and fp32) the gradients are true gradients, so the norm-clip is done here: from the
        norms NonFiniteGuard computed, with the coefficient applied inside a fused optimizer's
        kernel. A GradScaler (fp16) and sharded gradients keep Lightning's own clipping, which
        unscales and reduces first."""
        clip = getattr(self.trainer.strategy, "clip_gradients_across_meshes", None)
        if clip is not None:
            clip(optimizer, gradient_clip_val, gradient_clip_algorithm)
            return
        raw = optimizer.optimizer if isinstance(optimizer, LightningOptimizer) else optimizer
        params = [p for group in raw.param_groups for p in group["params"] if p.grad is not None]
        plain = not any(isinstance(p.grad, DTensor) for p in params)
        if not gradient_clip_val or getattr(self.trainer.precision_plugin, "scaler", None) is not None or not plain:
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
        elif gradient_clip_algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, gradient_clip_val)
        else:
            clip_grad_norm_shared(self, raw, params, float(gradient_clip_val))

    def forward(self, input_ids: Tensor, position_ids: Tensor | None = None,
                documents: DocumentLayout | None = None):
        """``position_ids``: rows packed with several documents (attention stays inside each);
        ``documents``: their layout with offsets already found (then ``position_ids`` is not needed)."""
        if self.built is None:  # used outside a Trainer: build on the module's device
            self.configure_model()
        with self.built.autocast():
            return self.model(input_ids, position_ids=None if documents is not None else position_ids,
                              documents=documents)

    def forward_batch(self, batch: dict[str, Any]):
        """The forward of a loader's batch: packed rows with the offsets the DataModule found on the
        host (see :mod:`biomoe.data.document_offsets`), so the GPU is not waited for."""
        return self(batch["input_ids"], batch.get("position_ids"), batch_documents(batch))

    # --------------------------------------------------------------------------------- training
    def _loss_terms(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        # precision recipe (te.autocast) around the forward only
        out = self.forward_batch(batch)
        ce_sum, n = masked_cross_entropy_sum(out.logits, batch["labels"], batch["loss_mask"])
        ce = ce_sum / n.clamp_min(1.0)
        loss = ce + self.config.aux_loss_coef * out.aux_loss + self.config.z_loss_coef * out.z_loss
        return {"loss": loss, "ce": ce, "ce_sum": ce_sum, "n": n, "aux": out.aux_loss, "z": out.z_loss,
                "logits": out.logits}

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        """Logs device tensors with ``prog_bar=False``: Lightning converts those to numbers only when
        the logger writes (every ``log_every_n_steps``). A device tensor in the progress bar would be
        read every step (a host-device sync); the bar gets host values from :meth:`on_train_batch_end`."""
        if (warning := self._lengths.see(batch["input_ids"].shape[-1])) is not None:
            rank_zero_warn(warning)
        terms = self._loss_terms(batch)
        ce = terms["ce"].detach()
        loss = terms["loss"].detach()
        rows = batch["input_ids"].shape[0]  # given: a packed batch's document offsets are no batch size
        self.log("train/loss", loss, batch_size=rows)
        self.log_dict({"train/ce": ce, "train/aux": terms["aux"].detach(), "train/z": terms["z"].detach(),
                       "train/bits_per_base": ce / LN2, "train/perplexity": torch.exp(ce)}, batch_size=rows)
        self._tokens_since_log += batch["input_ids"].numel() * self.trainer.world_size
        self._last_loss = loss
        return terms["loss"]

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """At logging steps only (after the optimizer step): wait for the device once, then log
        tokens/s over the interval since the previous logging step on the host clock (both ends
        measured after a sync, so the device's work is in it), and the loss for the progress bar,
        both as host tensors. The logger reads this step's device metrics right after, for free."""
        if self.global_step == self._step_seen:
            return  # gradient accumulation: no optimizer step ended here
        self._step_seen = self.global_step
        if self._clock.started and not logs_this_step(self.trainer):
            return
        self._sync()
        seconds = self._clock.lap(time.perf_counter())
        if seconds is not None:
            rate = self._tokens_since_log / max(seconds, 1e-9)
            self.log("train/tokens_per_s", torch.tensor(rate), prog_bar=True)
            self.log("train/seconds", torch.tensor(self._clock.total, dtype=torch.float64), logger=True)
            if self.device.type == "cuda":  # the allocator's high-water mark: a host counter, no sync
                peak = torch.cuda.max_memory_allocated(self.device) / 2**30
                self.log("train/peak_memory_gib", torch.tensor(peak), logger=True)
            if self._last_loss is not None:
                self.log("loss", self._last_loss.detach().cpu(), prog_bar=True, logger=False)
        self._tokens_since_log = 0

    def on_train_start(self) -> None:
        self._clock.restart()
        self._tokens_since_log, self._step_seen = 0, self.global_step

    def on_validation_start(self) -> None:
        """Validation inside fit is not training time: the clock stops (after the device caught up)."""
        if self._clock.started:
            self._sync()
            self._clock.pause(time.perf_counter())

    def on_validation_end(self) -> None:
        if self._clock.started:
            self._sync()
            self._clock.resume(time.perf_counter())

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        """Router upkeep right after the update, not in ``on_train_batch_end``: that hook runs
        after callbacks (ModelCheckpoint), so a checkpoint would miss this step's bias update and
        stats reset, and a resumed run would diverge from an uninterrupted one."""
        try:
            super().optimizer_step(*args, **kwargs)
        finally:
            forget_step_grad_norms(self)
            for optimizer in self.trainer.optimizers:
                drop_grad_scale(optimizer)
        self._after_optimizer_step()

    def _after_optimizer_step(self) -> None:
        for layer in self.model.moe_layers():
            layer.router.update_bias()
        step = self.global_step
        if self.log_expert_load_every_n_steps and step % self.log_expert_load_every_n_steps == 0:
            self.log_expert_load()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Add what exact resume needs beyond Lightning's state (router statistics, RNG)."""
        checkpoint[CHECKPOINT_KEY] = collect_resume_state(self.model)
        self._clock.save(checkpoint)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        restore_resume_state(self.model, checkpoint.get(CHECKPOINT_KEY))
        self._clock.load(checkpoint)

    def log_expert_load(self) -> None:
        """Per-layer expert load since the last call: fractions, max/mean ratio, normalised entropy
        of the load, and the mean normalised entropy of each token's routing distribution.

        All layers' statistics are copied to the host at once (one sync) and logged as host tensors."""
        routers = [(idx, block.mlp.router) for idx, block in enumerate(self.model.blocks)
                   if getattr(block, "is_moe", False)]
        if not routers:
            return
        packed = torch.stack([torch.cat([r.load_counts.float(), r.entropy_sum.float().to(r.load_counts.device)])
                              for _, r in routers]).cpu()
        metrics: dict[str, Tensor] = {}
        for (layer_idx, router), row in zip(routers, packed):
            num_experts = router.load_counts.numel()
            counts, entropy_sum = row[:num_experts], row[num_experts:]
            total = float(counts.sum())
            if total == 0:
                continue
            frac = counts / total
            for e, value in enumerate(frac.tolist()):
                metrics[f"load/layer{layer_idx}/expert{e}"] = torch.tensor(value)
            metrics[f"load/layer{layer_idx}/max_over_mean"] = frac.max() * num_experts
            entropy = -(frac * torch.log(frac.clamp_min(1e-12))).sum() / math.log(num_experts)
            metrics[f"load/layer{layer_idx}/entropy"] = entropy
            decisiveness = router_entropy(entropy_sum, num_experts)
            if decisiveness is not None:
                metrics[f"load/layer{layer_idx}/router_entropy"] = decisiveness
            router.reset_stats()
        if metrics:
            self.log_dict(metrics, rank_zero_only=True)

    # ------------------------------------------------------------------------------- evaluation
    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor] | None:
        return self._eval_step(batch, self.val_ce, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor] | None:
        return self._eval_step(batch, self.test_ce, "test")

    def _eval_step(self, batch: dict[str, Tensor], metric: MeanMetric, stage: str) -> dict[str, Tensor] | None:
        terms = self._loss_terms(batch)
        n = terms["n"]
        # Token-weighted mean: the result is the per-base average over the whole split.
        metric.update(terms["ce_sum"] / n.clamp_min(1.0), weight=n)
        rows = batch["input_ids"].shape[0]
        self.log(f"{stage}/ce", metric, prog_bar=True, batch_size=rows)
        self.log(f"{stage}/aux", terms["aux"], sync_dist=True, batch_size=rows)
        if "genome" in batch:  # per-window (packed: per-token) sums, added up per genome by PerGenomeMetrics
            return genome_step_outputs(terms["logits"], batch)
        return None

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        """Per-position log p(base) in nats (NaN where the loss mask excludes the base)."""
        out = self.forward_batch(batch)
        loglik = per_position_log_likelihood(out.logits, batch["labels"])
        loglik = torch.where(batch["loss_mask"].bool(), loglik, torch.full_like(loglik, float("nan")))
        return {"log_likelihood": loglik}

    def on_validation_epoch_end(self) -> None:
        self._log_derived("val", self.val_ce)

    def on_test_epoch_end(self) -> None:
        self._log_derived("test", self.test_ce)

    def _log_derived(self, stage: str, metric: MeanMetric) -> None:
        ce = metric.compute()
        self.log(f"{stage}/bits_per_base", ce / LN2, prog_bar=True)
        self.log(f"{stage}/perplexity", torch.exp(ce))

    # -------------------------------------------------------------------------------- optimizer
    def configure_optimizers(self) -> dict[str, Any]:
        decay, no_decay = [], []
        for name, param in self.named_parameters():
            if not param.requires_grad:
                continue
            # Norm gains and embeddings are not decayed; matrices (incl. stacked experts) are.
            (no_decay if param.ndim < 2 or "embed" in name else decay).append(param)
        opt = self.optim
        fused = opt.fused if opt.fused is not None else self.device.type == "cuda"
        groups = [{"params": decay, "weight_decay": opt.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        if wants_master_weights(decay + no_decay, opt.master_weights):
            optimizer: torch.optim.Optimizer = master_weight_adamw(
                groups, lr=opt.lr, betas=tuple(opt.betas), eps=opt.eps, backend=opt.backend,
                moment_dtype=opt.moment_dtype, master_storage=opt.master_storage, device=self.device, fused=fused)
        else:
            if opt.moment_dtype != "fp32":
                raise ConfigError(f"model.optim.moment_dtype: {opt.moment_dtype} applies to the master-weight "
                                  "optimizer (bf16 parameters: trainer.precision bf16-true)")
            optimizer = torch.optim.AdamW(groups, lr=opt.lr, betas=tuple(opt.betas), eps=opt.eps,
                                          fused=fused or None)
        total = opt.max_steps or int(self.trainer.estimated_stepping_batches)
        schedule = warmup_cosine(opt.warmup_steps, max(total, 1), opt.min_lr_ratio)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

