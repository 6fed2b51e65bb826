"""GRPO advantages: per-turn returns inside a rollout, normalised across the rollouts of one task (a group).

For a rollout with per-turn rewards r_0..r_{T-1} (the final reward sits on the last turn):

    G_t = r_t + gamma * G_{t+1}                       # turn return, gamma = turn_discount
    A_t = (G_t - mean_g(G_0)) / (std_g(G_0) + eps)    # g: the group's rollouts, G_0 their total return

With gamma = 1 and only a final reward R, every turn carries R and A_t = (R - mean) / (std + eps): the
GRPO advantage. `std` is the unbiased sample std; a group whose totals are all equal (std <= eps, also
a group of one) is only centred, so discounted turn returns never get divided by ~0.

Step-level credit (GiGPO-style, `step_advantages`): turns of a group's rollouts that saw the identical
observation form an anchor group; each turn's return G_t is normalised within its anchor group:

    S_t = (G_t - mean_anchor(G)) / (std_anchor(G) + eps)      # 0 for an anchor seen once

and the trained advantage is A + w * S_t (w = `step_advantage_weight`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Dict, Hashable, List, Optional, Sequence

__all__ = ["turn_returns", "group_advantages", "step_advantages"]


def turn_returns(rewards: Sequence[Optional[float]], gamma: float = 1.0, fill_value: float = 0.0) -> List[float]:
    """Discounted return of every turn; turns without a reward count 0, a rollout with none gets `fill_value`."""
    if not rewards:
        return []
    known = [r for r in rewards if r is not None]
    r = [0.0 if x is None else float(x) for x in rewards]
    if not known:
        r[-1] = fill_value
    returns = [0.0] * len(r)
    running = 0.0
    for t in reversed(range(len(r))):
        running = r[t] + gamma * running
        returns[t] = running
    return returns


def group_advantages(
    returns: Sequence[Sequence[float]],
    group_ids: Sequence[Hashable],
    *,
    scale: bool = True,
    eps: float = 1e-6,
) -> List[List[float]]:
    """Per-turn advantages of each rollout, from its turn returns and the statistics of its group.

    Args:
        returns: `returns[i]` are the turn returns of rollout i (see `turn_returns`); `returns[i][0]` is
            its total return, the value compared within the group.
        group_ids: the group (task) of each rollout.
        scale: divide by the group std (GRPO); False only centres (Dr. GRPO).
    """
    if len(returns) != len(group_ids):
        raise ValueError(f"got {len(returns)} rollouts but {len(group_ids)} group ids; give one id per rollout")
    totals: Dict[Hashable, List[float]] = defaultdict(list)
    for rollout_returns, group in zip(returns, group_ids, strict=False):
        if rollout_returns:
            totals[group].append(rollout_returns[0])
    stats: Dict[Hashable, tuple[float, float]] = {}
    for group, values in totals.items():
        mean = sum(values) / len(values)
        var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
        stats[group] = (mean, math.sqrt(var))
    advantages: List[List[float]] = []
    for rollout_returns, group in zip(returns, group_ids, strict=False):
        mean, std = stats.get(group, (0.0, 0.0))
        denominator = (std + eps) if scale and std > eps else 1.0
        advantages.append([(g - mean) / denominator for g in rollout_returns])
    return advantages


def step_advantages(
    returns: Sequence[Sequence[float]],
    observations: Sequence[Sequence[Hashable]],
    group_ids: Sequence[Hashable],
    *,
    scale: bool = True,
    eps: float = 1e-6,
) -> List[List[float]]:
    """Per-turn step advantages: each turn's return normalised among the turns of its group that saw the
    same observation (`observations[i][t]`, any hashable key, e.g. the tokens the environment returned)."""
    if not (len(returns) == len(observations) == len(group_ids)):
        raise ValueError(
            f"got {len(returns)} rollouts of returns, {len(observations)} of observations and {len(group_ids)} "
            "group ids; give one of each per rollout"
        )
    anchors: Dict[Hashable, List[float]] = defaultdict(list)
    for rollout_returns, rollout_observations, group in zip(returns, observations, group_ids, strict=True):
        if len(rollout_returns) != len(rollout_observations):
            raise ValueError(
                f"a rollout has {len(rollout_returns)} turn returns but {len(rollout_observations)} observations"
            )
        for g, observation in zip(rollout_returns, rollout_observations, strict=True):
            anchors[(group, observation)].append(g)
    stats: Dict[Hashable, tuple[float, float]] = {}
    for key, values in anchors.items():
        mean = sum(values) / len(values)
        var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
        stats[key] = (mean, math.sqrt(var))
    result: List[List[float]] = []
    for rollout_returns, rollout_observations, group in zip(returns, observations, group_ids, strict=True):
        row: List[float] = []
        for g, observation in zip(rollout_returns, rollout_observations, strict=True):
            mean, std = stats[(group, observation)]
            row.append((g - mean) / ((std + eps) if scale and std > eps else 1.0))
        result.append(row)
    return result
