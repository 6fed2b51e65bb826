"""Score one prompt on a batch of tasks: publish it, run rollouts through the store, read rewards and messages."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from agentlightning.adapter.messages import OpenAIMessages
from agentlightning.emitter.reward import find_final_reward
from agentlightning.store.base import LightningStore
from agentlightning.types import EnqueueRolloutRequest, NamedResources, RolloutMode, Span

__all__ = ["RolloutResult", "BatchEvaluation", "evaluate_prompt_on_batch", "UNFINISHED"]

logger = logging.getLogger(__name__)

UNFINISHED = "unfinished"
"""Status recorded for a rollout that did not finish before the batch timeout."""

MessagesAdapter = Callable[[Sequence[Span]], list[OpenAIMessages]]


@dataclass
class RolloutResult:
    """What one rollout of the batch produced; `reward` None means no reward (counted as 0)."""

    rollout_id: str
    task: Any
    status: str
    reward: Optional[float]
    messages: list[OpenAIMessages] = field(default_factory=lambda: [])


@dataclass
class BatchEvaluation:
    """Results of a batch in task order, and the score: mean reward with missing rewards counted as 0."""

    resources_id: str
    mode: RolloutMode
    results: list[RolloutResult]
    score: float
    unfinished: int
    seconds: float


async def _rollout_result(
    store: LightningStore, adapter: Optional[MessagesAdapter], rollout_id: str, task: Any, status: str
) -> RolloutResult:
    spans = list(await store.query_spans(rollout_id, "latest"))
    reward = find_final_reward(spans)
    messages: list[OpenAIMessages] = []
    if adapter is not None:
        try:
            messages = adapter(spans)
        except Exception as exc:  # a malformed trace must not cost the batch its score
            logger.warning("Could not turn the spans of rollout %s into messages: %s", rollout_id, exc)
    return RolloutResult(rollout_id=rollout_id, task=task, status=status, reward=reward, messages=messages)


async def _cancel_unfinished(store: LightningStore, rollout_ids: Sequence[str]) -> None:
    """Keep runners from spending time on rollouts nobody waits for any more."""
    for rollout_id in rollout_ids:
        try:
            await store.update_rollout(rollout_id, status="cancelled")
        except Exception as exc:
            logger.debug("Could not cancel unfinished rollout %s: %s", rollout_id, exc)


async def evaluate_prompt_on_batch(
    store: LightningStore,
    adapter: Optional[MessagesAdapter],
    *,
    resources_id: str,
    resources: NamedResources,
    tasks: Sequence[Any],
    mode: RolloutMode,
    timeout: Optional[float],
) -> BatchEvaluation:
    """Run every task once with `resources` (published under `resources_id`) and score the batch.

    Waits for the rollouts with the store's blocking `wait_for_rollouts` up to `timeout` seconds. Rollouts
    still unfinished then are logged, cancelled and scored 0; the partial results are returned.
    """
    started = time.monotonic()
    await store.update_resources(resources_id, resources)
    requests = [EnqueueRolloutRequest(input=task, mode=mode, resources_id=resources_id) for task in tasks]
    rollouts = await store.enqueue_many_rollouts(requests)
    rollout_ids = [rollout.rollout_id for rollout in rollouts]
    finished = {r.rollout_id: r for r in await store.wait_for_rollouts(rollout_ids=rollout_ids, timeout=timeout)}
    unfinished_ids = [rollout_id for rollout_id in rollout_ids if rollout_id not in finished]
    if unfinished_ids:
        logger.warning(
            "%d of %d %s rollouts for resources %r did not finish within %s s; they count as reward 0: %s",
            len(unfinished_ids),
            len(rollout_ids),
            mode,
            resources_id,
            timeout,
            ", ".join(unfinished_ids),
        )
        await _cancel_unfinished(store, unfinished_ids)

    results: list[RolloutResult] = []
    for rollout_id, task in zip(rollout_ids, tasks, strict=True):
        rollout = finished.get(rollout_id)
        if rollout is None:
            results.append(RolloutResult(rollout_id=rollout_id, task=task, status=UNFINISHED, reward=None))
        else:
            results.append(await _rollout_result(store, adapter, rollout_id, task, rollout.status))
    score = sum(r.reward or 0.0 for r in results) / len(results) if results else 0.0
    return BatchEvaluation(
        resources_id=resources_id,
        mode=mode,
        results=results,
        score=score,
        unfinished=len(unfinished_ids),
        seconds=time.monotonic() - started,
    )
