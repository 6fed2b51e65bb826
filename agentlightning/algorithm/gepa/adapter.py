"""gepa's adapter over the store: a candidate is a set of prompt-template resources, run by our runners.

`evaluate` publishes the candidate (the initial resources with its templates in place) under an id derived
from its text, enqueues one rollout per example tagged with the run, candidate and example, waits for them
and scores each by its final reward. The trajectory of an example is what its stored spans say: the
conversation (messages and tool calls, through `TraceToMessages`), the reward, the status, the exceptions
and the agent's own notes (`agl.emit_message`). `make_reflective_dataset` turns them into the records the
reflection model reads.

gepa calls the adapter from its own thread; every store call runs on the algorithm's event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Coroutine, Optional, TypeVar

from agentlightning.adapter.messages import OpenAIMessages, TraceToMessages
from agentlightning.store.base import LightningStore
from agentlightning.types import EnqueueRolloutRequest, NamedResources, PromptTemplate, RolloutConfig

from ..apo.evaluation import RolloutResult, collect_results
from ..apo.placeholders import placeholder_problem
from .bridge import LoopBridge

if TYPE_CHECKING:
    from gepa import EvaluationBatch

__all__ = ["Example", "StoreAdapter", "META_RUN", "META_CANDIDATE", "META_EXAMPLE"]

logger = logging.getLogger(__name__)

META_RUN, META_CANDIDATE, META_EXAMPLE = "gepa_run", "gepa_candidate", "gepa_example"
_MAX_CONTENT_CHARS = 1500  # per message in a reflection record: bounds the reflection model's input

T = TypeVar("T")


@dataclass(frozen=True)
class Example:
    """A task and its stable key ("train:3", "val:0"), which tags its rollouts in the store."""

    key: str
    task: Any

    @property
    def mode(self) -> str:
        return "val" if self.key.startswith("val:") else "train"


class StoreAdapter:
    """Implements gepa's `GEPAAdapter` protocol with rollouts through the store.

    Args:
        store: the trainer's store.
        bridge: carries the calls from gepa's thread to the algorithm's event loop.
        messages: the adapter that turns a rollout's spans into conversations.
        base_resources: the initial resources; a candidate's templates replace the seed ones in them.
        seeds: the seed template of every optimized component (name -> template).
        run: the GEPA run name: prefixes the candidates' resources ids and tags the rollouts.
        timeout: seconds to wait for one batch of rollouts; stragglers score 0.
        reuse: rollouts of this run found in the store on resume, by (candidate id, example key), used
            (once each) instead of running the same candidate on the same example again.
    """

    propose_new_texts = None  # gepa's reflective proposer writes the new texts, with our reflection model

    def __init__(
        self,
        *,
        store: LightningStore,
        bridge: LoopBridge,
        messages: TraceToMessages,
        base_resources: NamedResources,
        seeds: Mapping[str, PromptTemplate],
        run: str,
        timeout: float,
        reuse: Optional[dict[tuple[str, str], list[str]]] = None,
    ) -> None:
        self.store = store
        self.bridge = bridge
        self.messages = messages
        self.base_resources = dict(base_resources)
        self.seeds = dict(seeds)
        self.run = run
        self.timeout = timeout
        self.reuse = reuse or {}
        self.rollouts_started = 0
        self.rollouts_reused = 0
        self._published: set[str] = set()

    # ---- candidates as resources ----

    def candidate_id(self, candidate: Mapping[str, str]) -> str:
        """The resources id of a candidate: the run name and a hash of its texts."""
        digest = hashlib.sha256(json.dumps(sorted(candidate.items())).encode("utf-8")).hexdigest()[:12]
        return f"{self.run}-{digest}"

    def resources_for(self, candidate: Mapping[str, str]) -> NamedResources:
        resources: NamedResources = dict(self.base_resources)
        for name, seed in self.seeds.items():
            resources[name] = PromptTemplate(template=candidate[name], engine=seed.engine)
        return resources

    def problem(self, candidate: Mapping[str, str]) -> Optional[str]:
        """Why a candidate cannot run (a template lost a placeholder or does not parse), or None."""
        for name, seed in self.seeds.items():
            issue = placeholder_problem(seed.template, candidate.get(name, ""), seed.engine)
            if issue is not None:
                return f"prompt {name!r}: {issue.replace('the edited prompt', 'the proposed template')}"
        return None

    # ---- gepa's interface ----

    def evaluate(
        self, batch: list[Example], candidate: dict[str, str], capture_traces: bool = False
    ) -> EvaluationBatch:
        return self._on_loop(self._evaluate(batch, candidate))

    def batch_evaluate(self, items: list[tuple[dict[str, str], list[Example]]]) -> list[EvaluationBatch]:
        async def all_of_them() -> list[EvaluationBatch]:
            return list(await asyncio.gather(*(self._evaluate(batch, candidate) for candidate, batch in items)))

        return self._on_loop(all_of_them())

    def make_reflective_dataset(
        self, candidate: dict[str, str], eval_batch: EvaluationBatch, components_to_update: list[str]
    ) -> dict[str, list[dict[str, Any]]]:
        """One record per example: its input, the conversation the agent had, and the feedback."""
        records = [_reflection_record(trajectory) for trajectory in eval_batch.trajectories or []]
        return {name: list(records) for name in components_to_update}

    # ---- evaluation ----

    def _on_loop(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.bridge.call(coroutine)

    async def _evaluate(self, batch: Sequence[Example], candidate: Mapping[str, str]) -> EvaluationBatch:
        from gepa import EvaluationBatch

        problem = self.problem(candidate)
        if problem is not None:  # no rollout can succeed: score 0 without spending any
            logger.warning("GEPA: a candidate was not run: %s", problem)
            trajectories = [_broken_trajectory(example, problem) for example in batch]
            outputs = [{"rollout_id": None, "status": "not run", "reward": None} for _ in batch]
            return EvaluationBatch(
                outputs=outputs, scores=[0.0] * len(batch), trajectories=trajectories, num_metric_calls=0
            )
        resources_id = self.candidate_id(candidate)
        if resources_id not in self._published:
            await self.store.update_resources(resources_id, self.resources_for(candidate))
            self._published.add(resources_id)
        rollout_ids = await self._rollouts(resources_id, batch)
        results, _unfinished = await collect_results(
            self.store,
            self.messages,
            rollout_ids,
            [example.task for example in batch],
            timeout=self.timeout,
            label=f"rollouts of GEPA candidate {resources_id}",
        )
        trajectories = [_trajectory(example, result) for example, result in zip(batch, results, strict=True)]
        outputs = [
            {"rollout_id": r.rollout_id, "status": r.status, "reward": r.reward, "answer": _final_answer(r.messages)}
            for r in results
        ]
        return EvaluationBatch(outputs=outputs, scores=[r.reward or 0.0 for r in results], trajectories=trajectories)

    async def _rollouts(self, resources_id: str, batch: Sequence[Example]) -> list[str]:
        """A rollout per example: one left in the store by an interrupted run, or a new one."""
        rollout_ids: list[Optional[str]] = []
        for example in batch:
            earlier = self.reuse.get((resources_id, example.key))
            rollout_ids.append(earlier.pop(0) if earlier else None)
        missing = [i for i, rollout_id in enumerate(rollout_ids) if rollout_id is None]
        self.rollouts_reused += len(batch) - len(missing)
        if missing:
            config = RolloutConfig(timeout_seconds=self.timeout)
            requests = [
                EnqueueRolloutRequest(
                    input=batch[i].task,
                    mode="val" if batch[i].mode == "val" else "train",
                    resources_id=resources_id,
                    config=config,
                    metadata={META_RUN: self.run, META_CANDIDATE: resources_id, META_EXAMPLE: batch[i].key},
                )
                for i in missing
            ]
            for i, rollout in zip(missing, await self.store.enqueue_many_rollouts(requests), strict=True):
                rollout_ids[i] = rollout.rollout_id
            self.rollouts_started += len(missing)
        return [rollout_id for rollout_id in rollout_ids if rollout_id is not None]


_REUSABLE = ("succeeded", "queuing", "requeuing")
"""Finished, or still waiting for a runner. A rollout that was running when the run died is not waited
for: its runner may be gone too."""


async def find_reusable_rollouts(store: LightningStore, run: str) -> dict[tuple[str, str], list[str]]:
    """The rollouts of `run` in the store that succeeded or wait for a runner, by (candidate id, example
    key), oldest first."""
    found: dict[tuple[str, str], list[str]] = {}
    for rollout in await store.query_rollouts(sort_by="start_time"):
        meta = rollout.metadata or {}
        if meta.get(META_RUN) != run or rollout.status not in _REUSABLE:
            continue
        found.setdefault((str(meta.get(META_CANDIDATE)), str(meta.get(META_EXAMPLE))), []).append(rollout.rollout_id)
    return found


# ---- trajectories and reflection records ----


def _trajectory(example: Example, result: RolloutResult) -> dict[str, Any]:
    return {
        "example": example.key,
        "task": example.task,
        "rollout_id": result.rollout_id,
        "status": result.status,
        "reward": result.reward,
        "conversation": result.messages[-1]["messages"] if result.messages else [],
        "errors": list(result.errors),
        "notes": list(result.notes),
    }


def _broken_trajectory(example: Example, problem: str) -> dict[str, Any]:
    return {
        "example": example.key,
        "task": example.task,
        "rollout_id": None,
        "status": "not run",
        "reward": None,
        "conversation": [],
        "errors": [problem],
        "notes": [],
    }


def _final_answer(conversations: list[OpenAIMessages]) -> Optional[str]:
    for message in reversed(conversations[-1]["messages"] if conversations else []):
        if message.get("role") == "assistant" and message.get("content"):
            return str(message["content"])
    return None


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_CONTENT_CHARS else text[:_MAX_CONTENT_CHARS] + " [...]"


def _render_message(message: dict[str, Any]) -> str:
    line = f"[{message.get('role', '?')}] {_clip(str(message.get('content') or ''))}".rstrip()
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        line += f"\n  -> tool call {function.get('name')}({_clip(str(function.get('arguments', '')))})"
    return line


def _reflection_record(trajectory: Mapping[str, Any]) -> dict[str, Any]:
    task = trajectory["task"]
    reward = trajectory["reward"]
    feedback = [f"Reward: {'none' if reward is None else f'{reward:.3f}'} (rollout {trajectory['status']})."]
    feedback += [f"Error: {error}" for error in trajectory["errors"]]
    feedback += [f"Note from the agent: {note}" for note in trajectory["notes"]]
    conversation = trajectory["conversation"]
    return {
        "Inputs": task if isinstance(task, str) else json.dumps(task, ensure_ascii=False, default=str),
        "Generated Outputs": "\n".join(_render_message(m) for m in conversation) or "(no LLM call was recorded)",
        "Feedback": "\n".join(feedback),
    }
