"""Deterministic GRPO (`GRPOConfig.deterministic`): what makes two runs with the same seed the same run.

Timing decides three things in a default run, and each is pinned here or in the policy server:

- which weights sample a rollout: deterministic mode needs sync rollouts (all rollouts of a step on the same
  weights; `GRPOConfig` refuses `async_rollouts=True` with it);
- the logits of a request: they change in their last bits with the batch it shares and with prefix-cache
  hits, so the server decodes one request at a time without prefix cache (`PolicyEngine(deterministic=True)`),
  and seeds each request from its content, not its arrival (`sampling.content_seed`);
- the order of a step's rollouts: runners finish in any order, and which of a group's identical first
  requests got which seed is arrival order, so the rollouts are sorted by group and token ids
  (`canonical_order`) before the advantages and micro-batches are formed.

Torch itself runs with `torch.use_deterministic_algorithms(True)` for the run (`deterministic_torch`).
Before the run starts, `determinism_check.py` proves that all this applies.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, List, Sequence, Tuple

from ...adapter.trajectory import triplet_tokens
from .batch import RolloutTriplets

__all__ = ["canonical_order", "deterministic_torch"]


def _content(rollout: RolloutTriplets) -> Tuple[Any, ...]:
    calls: List[Tuple[Any, ...]] = []
    for triplet in rollout.triplets:
        tokens = triplet_tokens(triplet)
        if tokens is None:
            calls.append((1, repr(triplet.prompt), repr(triplet.response), repr(triplet.reward)))
        else:
            calls.append((0, tuple(tokens[0]), tuple(tokens[1]), repr(triplet.reward)))
    return (repr(rollout.group_id), tuple(calls), repr(rollout.final_reward))


def canonical_order(rollouts: Sequence[RolloutTriplets]) -> List[RolloutTriplets]:
    """The rollouts sorted by group, then by their calls' token ids and rewards: the same order whatever
    order the runners finished in (rollouts with the same content are interchangeable)."""
    return sorted(rollouts, key=_content)


@contextlib.contextmanager
def deterministic_torch(enabled: bool) -> Iterator[None]:
    """`torch.use_deterministic_algorithms(True)` while in the block (restored after), when `enabled`.

    It also sets `CUBLAS_WORKSPACE_CONFIG=:4096:8` when unset (cuBLAS reads it when CUDA is first used, which
    in a GRPO run is later, when the model moves to the device); the self-check reports it if it is missing.
    """
    if not enabled:
        yield
        return
    import torch

    before = torch.are_deterministic_algorithms_enabled()
    added_cublas = "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    if added_cublas:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)
        if added_cublas:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
