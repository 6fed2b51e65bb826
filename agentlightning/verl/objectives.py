"""The RL choices agent mode makes on top of verl (v1.0's defaults), as functions over the batch tensors.

A rollout of an agent can become several samples (one per LLM call, or one per run of calls that continue
each other), so verl's sample-level statistics would weigh a rollout by how many samples or tokens it
produced. These put the rollout back at the centre:

- `rollout_level_advantages`: one score per rollout, normalised against the other rollouts of its task by
  verl's own outcome estimator (GRPO, RLOO, ...), then put on every token the rollout generated.
- `per_rollout_loss_weights`: per-token weights under which verl's `token-mean` policy loss becomes the
  mean over rollouts of each rollout's token mean. They multiply the advantages, which scales verl's
  clipped PPO loss token by token exactly (clipping acts on the ratio, and the weights are positive).
- `samples_within_update_cap`: how many samples fit `max_ppo_update_times` mini-batch updates.
- `select_async_groups`: bounded-staleness async, which complete task groups a step trains on.

All run on CPU with torch and verl's `core_algos`; `AgentLightningTrainer` applies them each step.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    import torch

__all__ = [
    "rollout_level_advantages",
    "per_rollout_loss_weights",
    "samples_within_update_cap",
    "rollout_index",
    "select_async_groups",
    "GroupSelection",
]


def rollout_index(rollout_ids: Sequence[Any]) -> tuple[list[str], list[int]]:
    """(distinct rollout ids in first-seen order, the position of each row's rollout in that list)."""
    order: dict[str, int] = {}
    rows = [order.setdefault(str(rid), len(order)) for rid in rollout_ids]
    return list(order), rows


def rollout_level_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_ids: Sequence[Any],
    uids: Sequence[Any],
    *,
    estimator: str = "grpo",
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), shaped like `response_mask`: each rollout's advantage on all its trained tokens.

    A rollout's score is the mean over its samples of their summed token rewards (its reward, plus any KL
    penalty folded in). Rollouts are grouped by `uids` (the task they sampled) for the estimator.
    """
    import numpy as np
    import torch
    from verl.trainer.ppo import core_algos

    if estimator == "gae":
        raise ValueError(
            "agentlightning.advantage_level=rollout needs an outcome estimator (grpo, rloo, ...); GAE scores "
            "tokens with the critic: set agentlightning.advantage_level=sample"
        )
    ids, rows = rollout_index(rollout_ids)
    row_of = torch.tensor(rows, dtype=torch.long, device=token_level_rewards.device)
    sums = token_level_rewards.sum(dim=-1)
    totals = torch.zeros(len(ids), dtype=sums.dtype, device=sums.device).index_add_(0, row_of, sums)
    counts = torch.zeros(len(ids), dtype=sums.dtype, device=sums.device).index_add_(0, row_of, torch.ones_like(sums))
    scores = (totals / counts).unsqueeze(-1)
    first_row = {rollout: row for row, rollout in reversed(list(enumerate(rows)))}
    index = np.array([uids[first_row[r]] for r in range(len(ids))], dtype=object)
    ones = torch.ones_like(scores)
    if estimator == "grpo":
        per_rollout, _ = core_algos.compute_grpo_outcome_advantage(
            token_level_rewards=scores, response_mask=ones, index=index, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo
        )
    else:
        estimate = core_algos.get_adv_estimator_fn(estimator)
        per_rollout, _ = estimate(token_level_rewards=scores, response_mask=ones, index=index, config=config)
    advantages = per_rollout[row_of, 0].unsqueeze(-1) * response_mask
    return advantages, advantages.clone()


def per_rollout_loss_weights(response_mask: torch.Tensor, rollout_ids: Sequence[Any]) -> torch.Tensor:
    """Weights w (like `response_mask`) with token-mean(w * loss) == mean over rollouts of their token mean.

    w = N / (R * T_r) on the trained tokens of rollout r, where N is the batch's trained tokens, R the
    rollouts with any trained token and T_r the trained tokens of rollout r; 0 elsewhere.
    """
    import torch

    ids, rows = rollout_index(rollout_ids)
    row_of = torch.tensor(rows, dtype=torch.long, device=response_mask.device)
    mask = response_mask.to(torch.float32)
    tokens = torch.zeros(len(ids), device=mask.device).index_add_(0, row_of, mask.sum(dim=-1))
    trained = tokens > 0
    n_rollouts = int(trained.sum().item())
    if n_rollouts == 0:
        return torch.zeros_like(mask)
    per_rollout = torch.where(trained, mask.sum() / (n_rollouts * tokens.clamp(min=1.0)), torch.zeros_like(tokens))
    return per_rollout[row_of].unsqueeze(-1) * mask


def samples_within_update_cap(n_samples: int, mini_batch_size: int, ppo_epochs: int, max_updates: Optional[int]) -> int:
    """How many samples (whole mini-batches) keep the PPO updates of one batch at `max_updates` or fewer.

    Each epoch makes one update per mini-batch. None: no cap (the whole mini-batches of `n_samples`).
    """
    if mini_batch_size < 1 or ppo_epochs < 1:
        raise ValueError(f"mini_batch_size and ppo_epochs must be >= 1, got {mini_batch_size}, {ppo_epochs}")
    whole = n_samples // mini_batch_size
    if max_updates is not None:
        if max_updates < 1:
            raise ValueError(f"max_ppo_update_times must be >= 1 or null, got {max_updates}")
        whole = min(whole, max(1, max_updates // ppo_epochs))
    return whole * mini_batch_size


@dataclass
class GroupSelection:
    """Which task groups a bounded-staleness async step trains on, drops, and carries over (by data id)."""

    train: list[str] = field(default_factory=lambda: [])
    stale: list[str] = field(default_factory=lambda: [])
    carried: list[str] = field(default_factory=lambda: [])


def select_async_groups(
    groups: Mapping[str, Sequence[str]],
    finished: Collection[str],
    enqueued_version: Mapping[str, int],
    weights_version: int,
    max_staleness: int,
    wanted: int,
) -> GroupSelection:
    """Oldest complete groups first, up to `wanted`; a group enqueued more than `max_staleness` weight updates
    ago is stale (dropped, complete or not); the rest wait for a later step.

    `groups` maps each data id to its rollout ids, in enqueue order; a group is complete when all of its
    rollouts are in `finished`.
    """
    selection = GroupSelection()
    for data_id, rollout_ids in groups.items():
        if weights_version - enqueued_version.get(data_id, weights_version) > max_staleness:
            selection.stale.append(data_id)
        elif len(selection.train) < wanted and all(rid in finished for rid in rollout_ids):
            selection.train.append(data_id)
        else:
            selection.carried.append(data_id)
    return selection
