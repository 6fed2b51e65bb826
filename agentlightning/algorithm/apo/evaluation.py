"""Score one prompt on a batch of tasks: publish it, run rollouts through the store, read rewards and messages."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from agentlightning.adapter.messages import OpenAIMessages
from agentlightning.emitter.message import get_message_value
from agentlightning.emitter.reward import find_final_reward
from agentlightning.store.base import LightningStore
from agentlightning.types import EnqueueRolloutRequest, NamedResources, RolloutMode, Span

__all__ = ["RolloutResult", "BatchEvaluation", "evaluate_prompt_on_batch", "collect_results", "UNFINISHED"]

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
    errors: list[str] = field(default_factory=lambda: [])
    """Exceptions recorded in the trace ("ValueError: ...") and the descriptions of spans that ended in error."""
    notes: list[str] = field(default_factory=lambda: [])
    """Messages the agent emitted (`agl.emit_message`), e.g. why an answer was graded wrong."""


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
    return RolloutResult(
        rollout_id=rollout_id,
        task=task,
        status=status,
        reward=reward,
        messages=messages,
        errors=_errors(spans),
        notes=[note for note in (get_message_value(span) for span in spans) if note],
    )


def _errors(spans: Sequence[Span]) -> list[str]:
    found: list[str] = []
    for span in spans:
        kind = span.attributes.get("exception.type")
        if kind is not None:
            found.append(f"{kind}: {span.attributes.get('exception.message', '')}".rstrip(": "))
        elif span.status.status_code == "ERROR":
            found.append(f"{span.name} failed: {span.status.description or 'no description'}")
    return found


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
    results, unfinished = await collect_results(
        store,
        adapter,
        [rollout.rollout_id for rollout in rollouts],
        tasks,
        timeout=timeout,
        label=f"{mode} rollouts for resources {resources_id!r}",
    )
    score = sum(r.reward or 0.0 for r in results) / len(results) if results else 0.0
    return BatchEvaluation(
        resources_id=resources_id,
        mode=mode,
        results=results,
        score=score,
        unfinished=unfinished,
        seconds=time.monotonic() - started,
    )


async def collect_results(
    store: LightningStore,
    adapter: Optional[MessagesAdapter],
    rollout_ids: Sequence[str],
    tasks: Sequence[Any],
    *,
    timeout: Optional[float],
    label: str,
) -> tuple[list[RolloutResult], int]:
    """Wait (up to `timeout` seconds) for rollouts already enqueued and read their results, in order.

    Rollouts still unfinished then are logged, cancelled and get status `UNFINISHED` and no reward.
    Returns the results and how many were unfinished.
    """
    finished = {r.rollout_id: r for r in await store.wait_for_rollouts(rollout_ids=list(rollout_ids), timeout=timeout)}
    unfinished_ids = [rollout_id for rollout_id in rollout_ids if rollout_id not in finished]
    if unfinished_ids:
        logger.warning(
            "%d of %d %s did not finish within %s s; they count as reward 0: %s",
            len(unfinished_ids),
            len(rollout_ids),
            label,
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
    return results, len(unfinished_ids)
