"""The RL choices of agent mode (`agentlightning.verl.objectives`) against verl's own `core_algos`, on CPU."""

from __future__ import annotations

import numpy as np
import pytest

from agentlightning.verl.objectives import (
    per_rollout_loss_weights,
    rollout_level_advantages,
    samples_within_update_cap,
    select_async_groups,
)

torch = pytest.importorskip("torch", reason="the verl batch tensors need torch (train extra)")
core_algos = pytest.importorskip("verl.trainer.ppo.core_algos", reason="needs verl (installed --no-deps) + codetiming")

# Task "a": rollout a1 made 3 samples (reward 1), a2 made 1 (reward 0). Task "b": b1 and b2, 1 sample each.
ROLLOUTS = ["a1", "a1", "a1", "a2", "b1", "b2"]
UIDS = ["a", "a", "a", "a", "b", "b"]
REWARDS = [1.0, 1.0, 1.0, 0.0, 0.5, 0.2]


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.float32)
    rewards = torch.zeros_like(mask)
    last = mask.sum(dim=-1).long() - 1
    rewards[torch.arange(len(REWARDS)), last] = torch.tensor(REWARDS)
    return rewards, mask


def test_rollout_level_advantages_score_each_rollout_once_against_its_group() -> None:
    rewards, mask = _batch()
    advantages, returns = rollout_level_advantages(rewards, mask, ROLLOUTS, UIDS, estimator="grpo")
    # GRPO over rollouts: task a = {1, 0}, task b = {0.5, 0.2}; each is +-1/sqrt(2) (unbiased std) after scaling.
    expected = {"a1": 1 / np.sqrt(2), "a2": -1 / np.sqrt(2), "b1": 1 / np.sqrt(2), "b2": -1 / np.sqrt(2)}
    for row, rollout in enumerate(ROLLOUTS):
        trained = mask[row].bool()
        assert torch.allclose(
            advantages[row][trained], torch.full_like(advantages[row][trained], expected[rollout]), atol=1e-4
        )
        assert torch.all(advantages[row][~trained] == 0)
    assert torch.equal(advantages, returns)
    # verl's sample-level GRPO counts a1 three times, so a2 looks worse than it is relative to a1's rollout.
    sample_level, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, index=np.array(UIDS, dtype=object)
    )
    assert not torch.allclose(sample_level[3][mask[3].bool()], advantages[3][mask[3].bool()], atol=1e-3)


def test_rollout_level_advantages_with_another_outcome_estimator_and_gae_refused() -> None:
    rewards, mask = _batch()
    advantages, _ = rollout_level_advantages(rewards, mask, ROLLOUTS, UIDS, estimator="rloo")
    # RLOO over rollouts: each rollout against the mean of the others of its task: a1 = 1 - 0, a2 = 0 - 1.
    assert advantages[0, 0].item() == pytest.approx(1.0) and advantages[3, 0].item() == pytest.approx(-1.0)
    assert advantages[4, 0].item() == pytest.approx(0.3) and advantages[5, 0].item() == pytest.approx(-0.3)
    with pytest.raises(ValueError, match="advantage_level=sample"):
        rollout_level_advantages(rewards, mask, ROLLOUTS, UIDS, estimator="gae")


def test_per_rollout_weights_turn_verls_token_mean_loss_into_the_mean_over_rollouts() -> None:
    from omegaconf import OmegaConf

    rewards, mask = _batch()
    advantages, _ = rollout_level_advantages(rewards, mask, ROLLOUTS, UIDS)
    generator = torch.Generator().manual_seed(0)
    old_log_prob = -torch.rand(mask.shape, generator=generator)
    log_prob = old_log_prob + 0.3 * torch.randn(mask.shape, generator=generator)  # some ratios get clipped
    config = OmegaConf.create(
        {"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.3, "global_batch_info": {}}
    )

    def token_losses(adv: torch.Tensor) -> torch.Tensor:
        """verl's vanilla loss of each token alone (token-mean over a single token = its loss)."""
        out = torch.zeros_like(mask)
        for i in range(mask.shape[0]):
            for j in range(mask.shape[1]):
                one = torch.zeros_like(mask)
                one[i, j] = 1.0
                loss, _ = core_algos.compute_policy_loss_vanilla(old_log_prob, log_prob, adv, one, "token-mean", config)
                out[i, j] = loss
        return out

    per_token = token_losses(advantages)
    by_rollout: dict[str, list[float]] = {}
    for row, rollout in enumerate(ROLLOUTS):
        by_rollout.setdefault(rollout, []).extend(per_token[row][mask[row].bool()].tolist())
    expected = float(np.mean([np.mean(values) for values in by_rollout.values()]))

    weights = per_rollout_loss_weights(mask, ROLLOUTS)
    weighted, _ = core_algos.compute_policy_loss_vanilla(
        old_log_prob, log_prob, advantages * weights, mask, "token-mean", config
    )
    assert weighted.item() == pytest.approx(expected, rel=1e-5)
    plain, _ = core_algos.compute_policy_loss_vanilla(old_log_prob, log_prob, advantages, mask, "token-mean", config)
    assert plain.item() != pytest.approx(expected, rel=1e-3), "without weights a1's 6 tokens count 6 times"
    assert torch.all(weights[mask == 0] == 0)


def test_update_cap_keeps_whole_mini_batches() -> None:
    assert samples_within_update_cap(10, 4, 1, None) == 8
    assert samples_within_update_cap(40, 4, 1, 3) == 12
    assert samples_within_update_cap(40, 4, 2, 3) == 4, "each epoch updates once per mini-batch"
    assert samples_within_update_cap(3, 4, 1, 2) == 0
    with pytest.raises(ValueError, match="max_ppo_update_times"):
        samples_within_update_cap(8, 4, 1, 0)


def test_async_groups_oldest_complete_first_stale_dropped() -> None:
    groups = {"old": ["o1", "o2"], "mid": ["m1", "m2"], "new": ["n1", "n2"], "newer": ["x1", "x2"]}
    versions = {"old": 0, "mid": 1, "new": 2, "newer": 2}
    finished = {"o1", "o2", "m1", "m2", "n1", "x1", "x2"}
    selection = select_async_groups(groups, finished, versions, weights_version=2, max_staleness=1, wanted=1)
    assert selection.stale == ["old"] and selection.train == ["mid"] and selection.carried == ["new", "newer"]
    wider = select_async_groups(groups, finished, versions, weights_version=2, max_staleness=2, wanted=3)
    assert wider.train == ["old", "mid", "newer"] and wider.carried == ["new"] and wider.stale == []
