"""Expert parallelism + FSDP2 on CPU with gloo, in real multi-process groups.

Every test spawns its own ranks (torch.multiprocessing, a free port) and compares against the
single-process model on the same global batch: EP must change where work happens, never the math.
Ranks assert themselves; a failed assertion or a hang (gloo timeout) fails the spawning test.
"""

from __future__ import annotations

import copy
import os
import socket
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed.tensor import DTensor

from biomoe.model.config import ModelConfig
from biomoe.model.transformer import MoETransformer
from biomoe.model.backends import LayerBackends
from biomoe.parallel import ParallelDims, ParallelPlan, build_meshes
from biomoe.parallel.parallelize import apply_data_parallelism, apply_expert_parallelism

SEQ = 16
GLOBAL_BATCH = 4
ATOL, RTOL = 2e-5, 1e-4


# --------------------------------------------------------------------------------- harness
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _entry(rank: int, world: int, port: int, fn, args: tuple) -> None:
    # The variables torchrun sets: Lightning then takes ranks from the environment, not a launcher.
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world),
                      RANK=str(rank), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      GROUP_RANK="0", TORCHELASTIC_RUN_ID="biomoe-test")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=90))
    try:
        fn(rank, world, *args)
        dist.barrier()  # nobody tears gloo down while a peer is still mid-collective
    finally:
        dist.destroy_process_group()
    # Skip interpreter teardown: gloo's background threads can abort ("terminate called without an
    # active exception") while C++ statics are destroyed, turning a passed rank into a SIGABRT.
    # Failures never reach this line: mp.spawn reports the exception raised above.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_ranks(world: int, fn, *args) -> None:
    """Run ``fn(rank, world, *args)`` on ``world`` gloo ranks; re-raises the first failure."""
    mp.spawn(_entry, args=(world, _free_port(), fn, args), nprocs=world, join=True)


# ----------------------------------------------------------------------------- the model
def tiny_config(backend: str = "grouped", **overrides) -> ModelConfig:
    values = dict(vocab_size=16, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  num_experts=4, top_k=2, ffn_hidden_size=32, aux_loss_coef=0.1, z_loss_coef=0.01)
    values.update(overrides)
    cfg = ModelConfig(**values)
    cfg.test_expert_backend = backend  # which kernel build() uses; not part of the architecture
    return cfg


def parallelize(model: torch.nn.Module, meshes, load_balancing: str = "global") -> torch.nn.Module:
    """The parallel steps of biomoe.build.build_model, on a model the test built itself."""
    plan = ParallelPlan(meshes, load_balancing)
    apply_expert_parallelism(model, plan)
    apply_data_parallelism(model, plan)
    return model


def global_batch(seed: int = 123) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 16, (GLOBAL_BATCH, SEQ + 1), generator=gen)
    return tokens[:, :-1], tokens[:, 1:]


def loss_of(model: torch.nn.Module, ids: torch.Tensor, labels: torch.Tensor, cfg: ModelConfig):
    out = model(ids)
    ce = F.cross_entropy(out.logits.reshape(-1, cfg.vocab_size).float(), labels.reshape(-1))
    return ce + cfg.aux_loss_coef * out.aux_loss + cfg.z_loss_coef * out.z_loss


def build(cfg: ModelConfig, seed: int = 0, expert_bias: list[float] | None = None,
          activation_checkpointing: bool = False) -> MoETransformer:
    torch.manual_seed(seed)
    model = MoETransformer(cfg, LayerBackends(experts=getattr(cfg, "test_expert_backend", "grouped")))
    if activation_checkpointing:  # between expert and data parallelism, as build_model does
        from biomoe.model.activation_checkpointing import apply_activation_checkpointing

        apply_activation_checkpointing(model)
    if expert_bias is not None:
        for layer in model.moe_layers():
            layer.router.expert_bias.copy_(torch.tensor(expert_bias))
    return model


def full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


def reference(cfg: ModelConfig, **build_kwargs) -> tuple[float, dict[str, torch.Tensor]]:
    """Loss and gradients of the whole global batch in one process."""
    model = build(cfg, **build_kwargs)
    ids, labels = global_batch()
    loss = loss_of(model, ids, labels, cfg)
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


def parallel_step(rank: int, world: int, cfg: ModelConfig, dims: ParallelDims, **build_kwargs):
    """This rank's slice of the global batch through the sharded model; returns (mean loss, model)."""
    meshes = build_meshes(dims, "cpu")
    model = parallelize(build(cfg, **build_kwargs), meshes)
    ids, labels = global_batch()
    per_rank = GLOBAL_BATCH // world
    dp_rank = meshes.dp.get_local_rank()
    part = slice(dp_rank * per_rank, (dp_rank + 1) * per_rank)
    loss = loss_of(model, ids[part], labels[part], cfg)
    loss.backward()
    mean = loss.detach().clone()
    dist.all_reduce(mean)
    return mean.item() / world, model


def assert_parity(rank: int, world: int, cfg: ModelConfig, dims: ParallelDims, **build_kwargs) -> dict:
    ref_loss, ref_grads = reference(cfg, **build_kwargs)
    loss, model = parallel_step(rank, world, cfg, dims, **build_kwargs)
    assert abs(loss - ref_loss) < 1e-5, (dims, loss, ref_loss)
    grads = {}
    for name, param in model.named_parameters():  # same order on every rank (collectives)
        assert param.grad is not None, f"{name} has no gradient"
        grads[name] = full(param.grad)
        torch.testing.assert_close(grads[name], ref_grads[name], atol=ATOL, rtol=RTOL,
                                   msg=lambda m, n=name: f"{dims} {n}: {m}")
    assert_clipping_is_global(model, ref_grads, dims)
    return grads


def assert_clipping_is_global(model: torch.nn.Module, ref_grads: dict[str, torch.Tensor], dims) -> None:
    """The sharded gradient norm (each shard counted once, whatever its mesh) is the one-process
    norm, and clipping to half of it leaves every rank with exactly half."""
    from biomoe.parallel.grad_clip import clip_grad_norm_, global_grad_norm

    ref = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in ref_grads.values()]))
    torch.testing.assert_close(global_grad_norm(model.parameters()), ref, rtol=1e-5, atol=1e-7,
                               msg=lambda m: f"{dims} norm: {m}")
    clip_grad_norm_(model.parameters(), float(ref) / 2)
    torch.testing.assert_close(global_grad_norm(model.parameters()), ref / 2, rtol=1e-4, atol=1e-7,
                               msg=lambda m: f"{dims} clipped norm: {m}")


# ---------------------------------------------------------------------------------- parity
def _parity_two(rank: int, world: int) -> None:
    for backend in ("grouped", "loop"):
        grads = assert_parity(rank, world, tiny_config(backend), ParallelDims(1, 2, 2))
        assert any("experts" in n for n in grads)


@pytest.mark.slow
def test_ep2_matches_single_process():
    run_ranks(2, _parity_two)


def _parity_two_checkpointed(rank: int, world: int) -> None:
    grads = assert_parity(rank, world, tiny_config("grouped"), ParallelDims(1, 2, 2),
                          activation_checkpointing=True)
    assert any("_checkpoint_wrapped_module" in n for n in grads)


@pytest.mark.slow
def test_ep2_with_activation_checkpointing_matches_single_process():
    """Recomputing blocks in backward re-runs the all-to-all dispatch: same loss and gradients."""
    run_ranks(2, _parity_two_checkpointed)


def _parity_four(rank: int, world: int) -> None:
    cfg = tiny_config()
    assert_parity(rank, world, cfg, ParallelDims(1, 4, 2))  # dp2 x ep2: experts FSDP over 2 ranks
    assert_parity(rank, world, cfg, ParallelDims(2, 2, 2))  # HSDP replicas x ep2
    assert_parity(rank, world, cfg, ParallelDims(1, 4, 4))  # one expert per rank


@pytest.mark.slow
def test_dp2_ep2_matches_single_process():
    run_ranks(4, _parity_four)


def _local_load_balancing(rank: int, world: int) -> None:
    """``local`` statistics are a different loss on purpose: check they really stay local."""
    cfg = tiny_config()
    meshes = build_meshes(ParallelDims(1, 2, 2), "cpu")
    model = parallelize(build(cfg), meshes, load_balancing="local")
    assert all(layer.router.stats_reducer is None for layer in model.moe_layers())
    ids, labels = global_batch()
    part = slice(rank * 2, rank * 2 + 2)
    aux = model(ids[part]).aux_loss.detach()
    expected = build(cfg)(ids[part]).aux_loss  # per-micro-batch aux, computed locally
    torch.testing.assert_close(aux, expected, atol=1e-6, rtol=1e-5)


@pytest.mark.slow
def test_local_load_balancing_uses_micro_batch_statistics():
    run_ranks(2, _local_load_balancing)


# ------------------------------------------------------------------------------ zero tokens
def _zero_tokens(rank: int, world: int) -> None:
    # A large selection bias sends every token to experts 0 and 1, both on EP rank 0: rank 1's
    # experts receive nothing, and rank 1 receives zero rows in every layer.
    bias = [5.0, 5.0, 0.0, 0.0]
    for backend in ("loop", "grouped"):
        cfg = tiny_config(backend, router_bias_update_rate=1e-3)
        grads = assert_parity(rank, world, cfg, ParallelDims(1, 2, 2), expert_bias=bias)
        for name, grad in grads.items():
            assert torch.isfinite(grad).all(), name
            if name.endswith(("gate_up_proj", "down_proj")) and "experts" in name:
                assert grad[2:].abs().max() == 0, f"{name}: unused experts got gradient"
                assert grad[:2].abs().max() > 0, f"{name}: used experts got none"


@pytest.mark.slow
def test_zero_token_experts_do_not_hang_or_poison_gradients():
    run_ranks(2, _zero_tokens)


# ------------------------------------------------------------------------- checkpoint reshard
def _reshard(rank: int, world: int, root: str) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         set_model_state_dict)

    from biomoe.checkpoint.distributed import load_model_state

    cfg = tiny_config()
    gathered = StateDictOptions(full_state_dict=True)

    def sharded(ep: int, seed: int):
        return parallelize(build(cfg, seed=seed), build_meshes(ParallelDims(1, 2, ep), "cpu"))

    def save(model, path: Path) -> dict:
        dcp.save({"state_dict": get_model_state_dict(model)}, checkpoint_id=str(path))
        return get_model_state_dict(model, options=gathered)

    def load(model, path: Path) -> dict:
        state = {"state_dict": get_model_state_dict(model)}
        dcp.load(state, checkpoint_id=str(path))
        set_model_state_dict(model, state["state_dict"])
        return get_model_state_dict(model, options=gathered)

    def same(a: dict, b: dict) -> None:
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(full(a[key]).cpu(), full(b[key]).cpu()), key

    ep2_dir, ep1_dir = Path(root) / "ep2", Path(root) / "ep1"
    written_ep2 = save(sharded(ep=2, seed=0), ep2_dir)
    before = get_model_state_dict(sharded(ep=1, seed=1), options=gathered)
    key = "blocks.0.mlp.experts.gate_up_proj"
    assert not torch.equal(full(before[key]), full(written_ep2[key]))  # the load must do the work
    same(load(sharded(ep=1, seed=1), ep2_dir), written_ep2)  # EP=2 -> EP=1

    written_ep1 = save(sharded(ep=1, seed=2), ep1_dir)
    same(load(sharded(ep=2, seed=3), ep1_dir), written_ep1)  # EP=1 -> EP=2

    if rank == 0:  # one process, no process group: consolidated weights into the plain model
        single = build(cfg, seed=9)
        single.load_state_dict(load_model_state(ep2_dir))
        same(single.state_dict(), written_ep2)


@pytest.mark.slow
def test_checkpoint_reshards_between_ep2_and_ep1(tmp_path):
    run_ranks(2, _reshard, str(tmp_path))


# ----------------------------------------------------------------------- Lightning: resume
class _TokenDataset(torch.utils.data.Dataset):
    def __init__(self, n: int = 16) -> None:
        gen = torch.Generator().manual_seed(7)
        self.tokens = torch.randint(0, 16, (n, SEQ + 1), generator=gen)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        row = self.tokens[i]
        return {"input_ids": row[:-1], "labels": row[1:], "loss_mask": torch.ones(SEQ, dtype=torch.bool)}


def _fit(epochs: int, ckpt_path: str | None = None, save_to: str | None = None):
    import lightning as L

    from biomoe.model.config import OptimConfig
    from biomoe.training.step.lightning_module import BioMoEModule
    from biomoe.parallel import ExpertParallelStrategy

    losses: list[float] = []

    class Record(L.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            losses.append(float(outputs["loss"]))

    torch.manual_seed(0)
    module = BioMoEModule(tiny_config(), OptimConfig(lr=1e-2, warmup_steps=2, max_steps=8),
                          log_expert_load_every_n_steps=0)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=ExpertParallelStrategy(expert_parallel_size=2),
                        max_epochs=epochs, gradient_clip_val=0.5, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                        inference_mode=False, callbacks=[Record()])
    loader = torch.utils.data.DataLoader(_TokenDataset(), batch_size=2, shuffle=True)
    trainer.fit(module, loader, ckpt_path=ckpt_path)
    if save_to is not None:
        trainer.save_checkpoint(save_to)
    return losses, module, trainer


def _resume(rank: int, world: int, root: str) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from biomoe.checkpoint.distributed import consolidate

    straight, _, _ = _fit(epochs=2)
    assert len(straight) == 8 and straight[-1] < straight[0], straight
    ckpt = str(Path(root) / "last.ckpt")
    first, module, trainer = _fit(epochs=1, save_to=ckpt)
    first_again, _, _ = _fit(epochs=1, save_to=ckpt)  # overwriting an existing checkpoint dir
    assert first_again == first
    assert trainer.strategy.meshes.dims.ep == 2
    second, _, _ = _fit(epochs=2, ckpt_path=ckpt)
    torch.testing.assert_close(first + second, straight, atol=1e-6, rtol=1e-6)

    weights = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True))
    if rank == 0:
        single = Path(root) / "single.ckpt"
        consolidate(ckpt, single)
        exported = torch.load(single, weights_only=False)
        assert "optimizer_states" not in exported and exported["global_step"] == 4
        for key, value in weights.items():
            assert torch.equal(exported["state_dict"][key], full(value).cpu()), key


@pytest.mark.slow
def test_stop_and_resume_reproduces_uninterrupted_losses(tmp_path):
    run_ranks(2, _resume, str(tmp_path))


def _one_device(rank: int, world: int) -> None:
    import lightning as L

    from biomoe.model.config import OptimConfig
    from biomoe.training.step.lightning_module import BioMoEModule
    from biomoe.parallel import ExpertParallelStrategy

    module = BioMoEModule(tiny_config(), OptimConfig(lr=1e-2, warmup_steps=1, max_steps=1),
                          log_expert_load_every_n_steps=0)
    trainer = L.Trainer(accelerator="cpu", devices=1, strategy=ExpertParallelStrategy(), max_steps=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0)
    loader = torch.utils.data.DataLoader(_TokenDataset(), batch_size=2)
    trainer.fit(module, loader)
    assert trainer.global_step == 1
    assert not any(isinstance(p, DTensor) for p in module.model.parameters())


def _one_device_sharded(rank: int, world: int) -> None:
    import lightning as L

    from biomoe.model.config import OptimConfig
    from biomoe.training.step.lightning_module import BioMoEModule
    from biomoe.parallel import ExpertParallelStrategy

    losses = {}
    for shard in (False, True):
        torch.manual_seed(0)
        module = BioMoEModule(tiny_config(), OptimConfig(lr=1e-2, warmup_steps=1, max_steps=4),
                              log_expert_load_every_n_steps=0)

        class Losses(L.Callback):
            def __init__(self) -> None:
                self.seen: list[float] = []

            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                self.seen.append(float(outputs["loss"]))

        recorder = Losses()
        strategy = ExpertParallelStrategy(shard_single_device=shard)
        trainer = L.Trainer(accelerator="cpu", devices=1, strategy=strategy, max_steps=4, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                            num_sanity_val_steps=0, limit_val_batches=0, gradient_clip_val=1.0,
                            callbacks=[recorder])
        torch.manual_seed(1)
        trainer.fit(module, torch.utils.data.DataLoader(_TokenDataset(), batch_size=2))
        assert all(isinstance(p, DTensor) for p in module.model.parameters()) == shard
        losses[shard] = recorder.seen
    assert losses[True] == pytest.approx(losses[False], rel=1e-5)


@pytest.mark.slow
def test_sharding_forced_on_one_device_gives_dtensors_and_the_same_losses():
    run_ranks(1, _one_device_sharded)


@pytest.mark.slow
def test_strategy_on_one_device_trains_unsharded():
    """FSDP2 at world size 1 cost 37 % of the tokens/s on one H200 (it copies and casts every
    parameter each step); with nothing to shard the strategy leaves the model as plain tensors."""
    run_ranks(1, _one_device)


def _metric_callbacks_under_ep(rank: int, world: int, root: str) -> None:
    """Validation under EP=2 (each rank scores half the windows, the MoE layers exchange tokens)
    logs the held-out numbers one process gets on the whole split: the network, the Markov
    baseline and the repeat expert (exact matches and following copies)."""
    import lightning as L

    from biomoe.training.reports.markov_baseline import MarkovBaseline
    from biomoe.model.config import OptimConfig
    from biomoe.data.datamodule import GenomeDataModule
    from biomoe.training.step.lightning_module import BioMoEModule
    from biomoe.parallel import ExpertParallelStrategy
    from biomoe.training.reports.repeat_mixture import RepeatMixture
    from biomoe.genomics.repeat_mix import markov_log_probs, score

    def datamodule() -> GenomeDataModule:
        return GenomeDataModule(fasta=str(Path(root) / "g.fa"), seq_length=64, batch_size=2, val_fraction=0.25,
                                rc_prob=0.0, cache_dir=str(Path(root) / f"cache{rank}"), packing=False)

    cfg = tiny_config(vocab_size=64)
    module = BioMoEModule(cfg, OptimConfig(), log_expert_load_every_n_steps=0)
    module.model = build(cfg)  # the same weights on both ranks; configure_model then only shards them
    reference = copy.deepcopy(module.model).eval()
    callbacks = [MarkovBaseline(order=2), RepeatMixture(k=8, follow_copies=True)]
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=ExpertParallelStrategy(expert_parallel_size=2),
                        logger=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=callbacks)
    (metrics,) = trainer.validate(module, datamodule=datamodule())

    dm = datamodule()
    dm.setup("validate")
    assert len(dm.val_dataset) % (2 * world) == 0  # no padded duplicate windows on either rank

    @torch.no_grad()
    def log_probs(batch):
        return torch.log_softmax(reference(batch["input_ids"]).logits.float(), -1)

    table = callbacks[1].table
    exact = score(dm, log_probs, table, 0.003, 0.005, batch_size=4)
    copies = score(dm, log_probs, table, 0.003, 0.005, batch_size=4, follow_copies=True)
    assert metrics["val/bits_per_base"] == pytest.approx(exact["base_bits_per_base"], rel=1e-4)
    assert metrics["val/repeat_mix_bits_per_base"] == pytest.approx(exact["mixed_bits_per_base"], rel=1e-4)
    assert metrics["val/repeat_copy_mix_bits_per_base"] == pytest.approx(copies["mixed_bits_per_base"], rel=1e-4)
    assert metrics["val/repeat_fraction"] == pytest.approx(exact["repeat_fraction"], rel=1e-6)
    markov = score(dm, markov_log_probs(dm, 2), table, 0.003, 0.005, batch_size=4)
    assert metrics["val/markov_bits_per_base"] == pytest.approx(markov["base_bits_per_base"], rel=1e-5)
    assert exact["repeat_fraction"] > 0.05  # the held-out copy of unit is there to be found


@pytest.mark.slow
def test_metric_callbacks_under_expert_parallelism_match_one_process(tmp_path, write_fasta):
    from conftest import random_dna

    unit = random_dna(300, 61)
    # 2,240 bases: the last 560 (8 windows of 64, 4 per rank) hold out the second copy of unit.
    write_fasta({"chr": random_dna(1400, 62) + unit + random_dna(200, 63) + unit + random_dna(40, 64)})
    run_ranks(2, _metric_callbacks_under_ep, str(tmp_path))


# ------------------------------------------------------------------------------ pure units
def test_parallel_dims_validate_sizes():
    assert ParallelDims.from_world(8, 2).dp_shard_mod_ep == 4
    assert ParallelDims.from_world(16, 8, dp_replicate=2).dp_shard_mod_ep == 1
    with pytest.raises(ValueError, match="must divide"):
        ParallelDims.from_world(4, 3)
    with pytest.raises(ValueError, match="does not divide"):
        ParallelDims.from_world(6, 1, dp_replicate=4)


def test_strategy_refuses_single_file_checkpoints():
    from biomoe.parallel import ExpertParallelStrategy

    with pytest.raises(ValueError, match="distributed checkpoints"):
        ExpertParallelStrategy(expert_parallel_size=2, save_distributed_checkpoint=False)
