"""Router: top-k selection, probabilities, aux loss and z-loss against hand-written references."""

import math

import pytest
import torch

from biomoe.model.moe.router import TopKRouter, load_balancing_loss, router_entropy, router_z_loss


def reference_route(logits: torch.Tensor, k: int):
    """Token-by-token Mixtral routing written with Python lists."""
    indices, weights = [], []
    for row in logits.tolist():
        exps = [math.exp(v - max(row)) for v in row]
        probs = [e / sum(exps) for e in exps]
        top = sorted(range(len(row)), key=lambda i: -probs[i])[:k]
        total = sum(probs[i] for i in top)
        indices.append(top)
        weights.append([probs[i] / total for i in top])
    return torch.tensor(indices), torch.tensor(weights)


def test_topk_and_weights_match_reference():
    torch.manual_seed(0)
    router = TopKRouter(hidden_size=16, num_experts=6, top_k=2)
    x = torch.randn(40, 16)
    result = router(x)
    logits = x @ router.gate.weight.T
    ref_idx, ref_w = reference_route(logits, 2)
    assert torch.equal(result.expert_indices, ref_idx)
    torch.testing.assert_close(result.expert_weights, ref_w, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(result.expert_weights.sum(-1), torch.ones(40))
    assert torch.equal(result.tokens_per_expert, torch.bincount(ref_idx.flatten(), minlength=6))


def test_router_math_is_fp32_under_bf16_input():
    router = TopKRouter(8, 4, 1)
    result = router(torch.randn(5, 8, dtype=torch.bfloat16))
    assert result.expert_weights.dtype == torch.float32
    assert result.router_probs.dtype == torch.float32


def test_load_balancing_loss_hand_example():
    # 2 tokens, 2 experts, top-1. probs: token0 [0.75, 0.25], token1 [0.5, 0.5]; both go to expert 0.
    probs = torch.tensor([[0.75, 0.25], [0.5, 0.5]])
    counts = torch.tensor([2, 0])
    # f = [1, 0]; P = [0.625, 0.375]; E * sum f*P = 2 * 0.625 = 1.25
    assert load_balancing_loss(probs, counts, top_k=1).item() == pytest.approx(1.25)
    uniform = torch.full((4, 4), 0.25)
    assert load_balancing_loss(uniform, torch.tensor([2, 2, 2, 2]), top_k=2).item() == pytest.approx(1.0)


def test_router_aux_loss_equals_formula():
    torch.manual_seed(1)
    router = TopKRouter(8, 4, 2)
    result = router(torch.randn(32, 8))
    expected = load_balancing_loss(result.router_probs, result.tokens_per_expert, 2)
    torch.testing.assert_close(result.aux_loss, expected)


def test_z_loss_hand_example():
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    # logsumexp: ln 2 and ln 4 -> mean of squares
    expected = (math.log(2) ** 2 + math.log(4) ** 2) / 2
    assert router_z_loss(logits).item() == pytest.approx(expected, rel=1e-6)


def test_zero_tokens_give_zero_losses_without_nan():
    router = TopKRouter(8, 4, 2)
    result = router(torch.randn(0, 8))
    assert result.aux_loss.item() == 0.0 and result.z_loss.item() == 0.0
    assert result.tokens_per_expert.tolist() == [0, 0, 0, 0]


def test_expert_bias_changes_selection_not_weights_and_balances():
    torch.manual_seed(2)
    router = TopKRouter(8, 4, 1, bias_update_rate=0.05)
    router.train()
    x = torch.randn(256, 8) + 2.0  # strongly skewed inputs favour some experts
    before = router(x)
    router.update_bias()  # clears the evaluation's counts: the loop starts from a bias of 0.05 steps
    router.expert_bias.zero_()
    imbalance_before = before.tokens_per_expert.max().item()
    for _ in range(200):  # as training runs: no statistics reset between steps
        router(x)
        router.update_bias()
    after = router(x)
    assert after.tokens_per_expert.max().item() < imbalance_before
    # weights still come from the unbiased softmax (renormalised over k=1 -> exactly 1)
    torch.testing.assert_close(after.expert_weights, torch.ones(256, 1))
    assert router.expert_bias.abs().sum() > 0


def test_router_entropy_statistic():
    router = TopKRouter(8, 4, 2)
    router.train()
    with torch.no_grad():
        router.gate.weight.zero_()  # uniform routing: normalised entropy exactly 1
    router(torch.randn(10, 8))
    assert router_entropy(router.entropy_sum, 4).item() == pytest.approx(1.0, abs=1e-6)
    router.reset_stats()
    with torch.no_grad():
        router.gate.weight.copy_(torch.eye(4, 8) * 50)  # one-hot-ish routing: entropy near 0
    router(torch.eye(4, 8).repeat(3, 1))
    assert router_entropy(router.entropy_sum, 4).item() < 0.01
    router.reset_stats()
    assert router_entropy(router.entropy_sum, 4) is None


def _bias_trajectory(reset_every: int, steps: int = 300) -> tuple[list[torch.Tensor], list[int]]:
    """Aux-loss-free training of one router on skewed input (256 tokens, 4 experts), its load
    statistics reset for logging every ``reset_every`` steps (0: never): the bias after each step
    and the busiest expert's tokens in each step."""
    torch.manual_seed(2)
    router = TopKRouter(8, 4, 1, bias_update_rate=0.01)
    router.train()
    x = torch.randn(256, 8) + 2.0
    biases, busiest = [], []
    for step in range(1, steps + 1):
        busiest.append(int(router(x).tokens_per_expert.max()))
        router.update_bias()
        biases.append(router.expert_bias.clone())
        if reset_every and step % reset_every == 0:
            router.reset_stats()
    return biases, busiest


def test_bias_update_uses_this_steps_load_whatever_the_logging_interval():
    every_step, busiest_every = _bias_trajectory(1)
    for interval in (0, 50):
        biases, busiest = _bias_trajectory(interval)
        assert busiest == busiest_every
        for a, b in zip(biases, every_step):
            assert torch.equal(a, b)
    # and it balances: the busiest expert of the last steps holds far less than all 256 tokens
    assert max(busiest_every[-10:]) < 140


def test_gradient_accumulation_updates_the_bias_from_all_micro_batches_of_the_step():
    torch.manual_seed(3)
    router = TopKRouter(8, 4, 1, bias_update_rate=0.1)
    router.train()
    first, second = torch.randn(64, 8) + 2.0, torch.randn(64, 8) - 2.0
    counts = router(first).tokens_per_expert + router(second).tokens_per_expert
    router.update_bias()
    expected = 0.1 * torch.sign(counts.float().mean() - counts.float())
    assert torch.equal(router.expert_bias, expected)
    assert router.step_counts.abs().sum() == 0  # the next step counts from zero
    assert torch.equal(router.load_counts, counts.float())  # the logging window keeps them


def test_evaluation_forwards_do_not_move_the_bias():
    router = TopKRouter(8, 4, 1, bias_update_rate=0.1)
    router.eval()
    router(torch.randn(64, 8) + 2.0)
    router.update_bias()
    assert router.expert_bias.abs().sum() == 0
