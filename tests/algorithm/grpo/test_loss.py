"""The GRPO loss equals hand-computed values; prompt and padding tokens never contribute."""

from __future__ import annotations

import math

import pytest
import torch

from agentlightning.algorithm.grpo.loss import aggregate, grpo_loss, nll_loss, token_entropy, token_logprobs

pytestmark = pytest.mark.train


def test_loss_on_a_tiny_batch_matches_a_hand_computation() -> None:
    # Sample 0 (A = +1): two response tokens with ratios e^0.1 (inside the clip range) and e^0.5 (clipped at 1.2).
    # Sample 1 (A = -1): one response token with ratio e^-0.5 (clipped at 0.8 -> -A*0.8 = 0.8 > -A*ratio).
    logprobs = torch.tensor([[0.0, -1.0, -0.5], [0.0, -2.5, -9.0]])
    old = torch.tensor([[0.0, -1.1, -1.0], [0.0, -2.0, 0.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    advantages = torch.tensor([1.0, -1.0])
    out = grpo_loss(logprobs, old, advantages, mask, clip_eps_low=0.2, clip_eps_high=0.2)

    token0 = -math.exp(0.1)  # min(ratio*A, clip*A) for A>0 -> unclipped, as a loss: -ratio
    token1 = -1.2  # clipped upper bound
    token2 = 0.8  # A<0: max(-A*ratio, -A*clip) = max(e^-0.5, 0.8) = 0.8
    expected = (token0 + token1 + token2) / 3
    assert out.loss.item() == pytest.approx(expected, rel=1e-6)
    assert out.clip_fraction.item() == pytest.approx(2 / 3)
    assert out.kl.item() == 0.0


def test_k3_kl_and_entropy_terms() -> None:
    logprobs = torch.tensor([[0.0, math.log(0.5)]], requires_grad=True)
    ref = torch.tensor([[0.0, math.log(0.25)]])
    mask = torch.tensor([[0.0, 1.0]])
    entropy = torch.tensor([[0.0, 2.0]])
    out = grpo_loss(
        logprobs,
        logprobs.detach(),
        torch.tensor([0.0]),
        mask,
        ref_logprobs=ref,
        kl_coef=0.1,
        entropy=entropy,
        entropy_coef=0.01,
    )
    kl = 0.5 - math.log(0.5) - 1  # exp(r) - r - 1 with r = log(0.25/0.5)
    assert out.kl.item() == pytest.approx(kl)
    assert out.loss.item() == pytest.approx(0.1 * kl - 0.01 * 2.0, abs=1e-6)
    assert out.entropy.item() == pytest.approx(2.0)
    out.loss.backward()
    assert logprobs.grad is not None and logprobs.grad[0, 0] == 0  # masked position gets no gradient


def test_masked_positions_stay_finite_even_with_extreme_logprobs() -> None:
    logprobs = torch.tensor([[-1000.0, -1.0]])
    out = grpo_loss(
        logprobs,
        torch.tensor([[0.0, -1.0]]),
        torch.tensor([1.0]),
        torch.tensor([[0.0, 1.0]]),
        ref_logprobs=torch.zeros(1, 2),
        kl_coef=1.0,
    )
    assert torch.isfinite(out.loss)


def test_micro_batch_losses_add_up_to_the_full_batch_loss() -> None:
    torch.manual_seed(0)
    logprobs, old = -torch.rand(4, 6), -torch.rand(4, 6)
    mask = torch.tensor(
        [[0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [0, 0, 0, 1, 0, 0]], dtype=torch.float32
    )
    advantages = torch.tensor([1.0, -0.5, 0.3, 2.0])
    for mode in ("token-mean", "sequence-mean"):
        full = grpo_loss(logprobs, old, advantages, mask, aggregation=mode).loss
        tokens, sequences = float(mask.sum()), 4.0
        parts = sum(
            grpo_loss(
                logprobs[s],
                old[s],
                advantages[s],
                mask[s],
                aggregation=mode,
                num_tokens=tokens,
                num_sequences=sequences,
            ).loss
            for s in (slice(0, 1), slice(1, 4))
        )
        assert parts.item() == pytest.approx(full.item(), rel=1e-6)


def test_sequence_mean_weights_every_sequence_equally() -> None:
    values = torch.tensor([[1.0, 1.0, 1.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert aggregate(values, mask, "sequence-mean", num_tokens=4, num_sequences=2).item() == pytest.approx(2.5)
    assert aggregate(values, mask, "token-mean", num_tokens=4, num_sequences=2).item() == pytest.approx(7 / 4)
    with pytest.raises(ValueError, match="aggregation"):
        aggregate(values, mask, "sum", num_tokens=1, num_sequences=1)


def test_token_logprobs_are_shifted_next_token_logprobs_at_a_temperature() -> None:
    torch.manual_seed(0)
    logits = torch.randn(1, 4, 7)
    ids = torch.tensor([[3, 1, 6, 2]])
    logprobs, entropy = token_logprobs(logits, ids, temperature=0.5, with_entropy=True)
    expected = [0.0] + [torch.log_softmax(logits[0, t - 1] / 0.5, -1)[ids[0, t]].item() for t in range(1, 4)]
    assert logprobs[0].tolist() == pytest.approx(expected, abs=1e-6)
    p = torch.softmax(logits[0, 0] / 0.5, -1)
    assert entropy is not None and entropy[0, 1].item() == pytest.approx(-(p * p.log()).sum().item(), abs=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_token_entropy_row_by_row_equals_the_batched_entropy_bit_for_bit(temperature: float) -> None:
    torch.manual_seed(0)
    logits = torch.randn(5, 9, 300, requires_grad=True) * 3
    ids = torch.randint(0, 300, (5, 9))
    _, batched = token_logprobs(logits, ids, temperature, with_entropy=True)
    assert batched is not None
    for rows in (1, 2, 5):
        chunked = token_entropy(logits, temperature, rows_per_chunk=rows)
        assert not chunked.requires_grad and torch.equal(chunked, batched.detach())


def test_token_logprobs_at_temperature_one_equal_those_divided_by_one() -> None:
    torch.manual_seed(1)
    logits = torch.randn(2, 6, 50)
    ids = torch.randint(0, 50, (2, 6))
    by_one = torch.nn.functional.pad(
        (logits[:, :-1] / 1.0).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        - torch.logsumexp(logits[:, :-1] / 1.0, dim=-1),
        (1, 0),
    )
    assert torch.equal(token_logprobs(logits, ids, 1.0)[0], by_one)


def test_rollout_mean_weighs_every_rollout_equally_by_hand() -> None:
    # Rollout a: two rows (one of 3 trained tokens, one of 1) with A = +1; rollout b: one row of 1 token, A = -1.
    # On-policy (ratio 1) every token's pg loss is -A: a's tokens give -1 each, b's token gives +1.
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    logprobs = -torch.rand(3, 4)
    advantages = torch.tensor([1.0, 1.0, -1.0])
    weights = torch.tensor([1 / 4, 1 / 4, 1.0])  # 1 / (the rollout's trained tokens: 3 + 1 for a, 1 for b)
    out = grpo_loss(logprobs, logprobs, advantages, mask, aggregation="rollout-mean", row_weights=weights)
    # rollout a: (-1 - 1 - 1 - 1) / 4 = -1; rollout b: +1 / 1 = +1; mean over the 2 rollouts = 0.
    assert out.loss.item() == pytest.approx(0.0, abs=1e-6)
    token_mean = grpo_loss(logprobs, logprobs, advantages, mask, aggregation="token-mean").loss
    assert token_mean.item() == pytest.approx((-4 + 1) / 5)  # the many-token rollout outweighs the other
    # Micro-batches add up when given the step's total weight (2 rollouts).
    parts = sum(
        grpo_loss(
            logprobs[s],
            logprobs[s],
            advantages[s],
            mask[s],
            aggregation="rollout-mean",
            row_weights=weights[s],
            total_weight=2.0,
        ).loss
        for s in (slice(0, 1), slice(1, 3))
    )
    assert parts.item() == pytest.approx(0.0, abs=1e-6)


def test_nll_loss_is_the_mean_negative_log_likelihood_of_the_trained_tokens() -> None:
    logprobs = torch.tensor([[0.0, -1.0, -3.0], [0.0, -2.0, -50.0]], requires_grad=True)
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]])  # prompt and padding positions do not count
    out = nll_loss(logprobs, mask, aggregation="token-mean")
    assert out.loss.item() == pytest.approx((1.0 + 3.0 + 2.0) / 3)
    assert out.pg_loss.item() == pytest.approx(2.0) and out.kl.item() == 0.0 and out.ratio.item() == 1.0
    out.loss.backward()
    assert logprobs.grad is not None
    assert torch.allclose(logprobs.grad, torch.tensor([[0.0, -1 / 3, -1 / 3], [0.0, -1 / 3, 0.0]]))
    per_row = nll_loss(logprobs.detach(), mask, aggregation="sequence-mean")
    assert per_row.loss.item() == pytest.approx(((1.0 + 3.0) / 2 + 2.0) / 2)
