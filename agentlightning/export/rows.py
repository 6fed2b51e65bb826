"""Rows of a trajectory dataset: from GRPO samples, from a store's rollouts, and back into a store.

A row is one training row as GRPO builds it (`algorithm/grpo/batch.py`): a prompt, then the completion
tokens with a loss mask, with the row's reward, advantage and the policy version that sampled it.
Importing (`importing.py`) writes each row as one LLM-call span (token ids, logprobs, loss mask, messages,
policy version) and the rollout's reward after the last one, so exporting the imported store gives the same rows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Optional

from agentlightning.adapter.retokenize import RETOKENIZED, TOKEN_IDS_SOURCE
from agentlightning.adapter.triplet import TracerTraceToTriplet
from agentlightning.algorithm.grpo.batch import RolloutTriplets, Sample, samples_from_rollouts
from agentlightning.attributes.genai import AGL_TOKEN_IDS_SOURCE
from agentlightning.emitter import find_final_reward
from agentlightning.store.base import LightningStore
from agentlightning.types import Rollout, Span, Triplet

from .importing import IMPORTED_FROM

__all__ = ["rows_from_samples", "rows_from_store"]


def _row(sample: Sample, index: int, **context: Any) -> dict[str, Any]:
    mask = sample.loss_mask if sample.loss_mask is not None else [1] * len(sample.response_ids)
    return {
        "rollout_id": sample.rollout_id,
        "attempt_id": context.get("attempt_id") or "",
        "group_id": str(sample.group_id),
        "row_index": index,
        "mode": context.get("mode"),
        "step": context.get("step"),
        "task": context.get("task"),
        "prompt_ids": list(sample.prompt_ids),
        "completion_ids": list(sample.response_ids),
        "completion_logprobs": list(sample.old_logprobs) if sample.old_logprobs is not None else None,
        "completion_loss_mask": list(mask),
        "input_ids": list(sample.prompt_ids) + list(sample.response_ids),
        "completion_mask": [0] * len(sample.prompt_ids) + list(mask),
        "labels": [-100] * len(sample.prompt_ids)
        + [t if m else -100 for t, m in zip(sample.response_ids, mask, strict=True)],
        "reward": float(sample.reward),
        "advantage": float(sample.advantage),
        "policy_version": sample.policy_version,
        "turns": sample.turns,
        "token_ids_source": context.get("token_ids_source") or "recorded",
        "prompt": context.get("prompt"),
        "completion": context.get("completion"),
    }


def rows_from_samples(samples: Sequence[Sample], *, step: Optional[int] = None) -> list[dict[str, Any]]:
    """Rows of a GRPO step's samples (what `GRPO.train_step` trains on), in order."""
    counters: dict[str, int] = {}
    rows: list[dict[str, Any]] = []
    for sample in samples:
        index = counters.get(sample.rollout_id, 0)
        counters[sample.rollout_id] = index + 1
        rows.append(_row(sample, index, step=step))
    return rows


def _group_of(rollout: Rollout) -> str:
    metadata = rollout.metadata or {}
    for key in ("group_id", "grpo_group"):
        if metadata.get(key) is not None:
            return str(metadata[key])
    return json.dumps(rollout.input, sort_keys=True, default=str)


def _text(triplet: Triplet) -> tuple[Optional[str], Optional[str]]:
    prompt = triplet.prompt.get("raw_content") if isinstance(triplet.prompt, dict) else None
    completion = triplet.response.get("raw_content") if isinstance(triplet.response, dict) else None
    if isinstance(completion, list) and completion and isinstance(completion[0], Mapping):
        completion = completion[0].get("content")  # type: ignore[union-attr]
    return (json.dumps(prompt) if prompt is not None else None), (str(completion) if completion is not None else None)


async def rows_from_store(
    store: LightningStore,
    *,
    tokenizer: Any = None,
    aggregation: Literal["trajectory", "transition"] = "trajectory",
    statuses: Sequence[str] = ("succeeded",),
    reward_fill_value: float = 0.0,
) -> list[dict[str, Any]]:
    """Rows of every rollout in `statuses`, from its latest attempt's spans (`TracerTraceToTriplet`).

    Advantages are normalised within groups (`group_id` / `grpo_group` rollout metadata, else equal inputs).
    With `tokenizer`, calls recorded without token ids are retokenized (`token_ids_source: retokenized`).
    """
    adapter = TracerTraceToTriplet(tokenizer=tokenizer)
    contexts: dict[str, dict[str, Any]] = {}
    collected: list[tuple[RolloutTriplets, bool]] = []
    for rollout in await store.query_rollouts(status_in=list(statuses)):  # type: ignore[arg-type]
        attempt = await store.get_latest_attempt(rollout.rollout_id)
        spans: list[Span] = list(await store.query_spans(rollout.rollout_id, "latest"))
        triplets = adapter.adapt(spans)
        final = find_final_reward(spans) if all(t.reward is None for t in triplets) else None
        imported = IMPORTED_FROM in (rollout.metadata or {})
        collected.append((RolloutTriplets(rollout.rollout_id, _group_of(rollout), triplets, final), imported))
        prompt, completion = _text(triplets[0]) if triplets else (None, None)
        contexts[rollout.rollout_id] = {
            "attempt_id": attempt.attempt_id if attempt is not None else "",
            "mode": rollout.mode,
            "step": (rollout.metadata or {}).get("grpo_step"),
            "task": json.dumps(rollout.input, default=str),
            "token_ids_source": RETOKENIZED
            if any(t.metadata.get(TOKEN_IDS_SOURCE) == RETOKENIZED for t in triplets)
            or any(s.attributes.get(AGL_TOKEN_IDS_SOURCE) == RETOKENIZED for s in spans)
            else "recorded",
            "prompt": prompt,
            "completion": completion,
            "triplets": triplets,
            "imported": imported,
        }
    rows: list[dict[str, Any]] = []
    # Imported rollouts hold one call per original row: kept one row per call, with the recorded loss masks.
    rollouts = [r for r, _ in collected]
    samples = samples_from_rollouts(rollouts, aggregation=aggregation, reward_fill_value=reward_fill_value)
    imported_samples = samples_from_rollouts(rollouts, aggregation="transition", reward_fill_value=reward_fill_value)
    for rollout in rollouts:
        context = contexts[rollout.rollout_id]
        chosen = imported_samples if context["imported"] else samples
        own = [s for s in chosen if s.rollout_id == rollout.rollout_id]
        for index, sample in enumerate(own):
            if context["imported"]:
                sample = _with_recorded_mask(sample, context["triplets"][index])
                prompt, completion = _text(context["triplets"][index])
                context = {**context, "prompt": prompt, "completion": completion}
            rows.append(_row(sample, index, **context))
    return rows


def _with_recorded_mask(sample: Sample, triplet: Triplet) -> Sample:
    mask = triplet.response.get("loss_mask") if isinstance(triplet.response, dict) else None
    if isinstance(mask, list) and len(mask) == len(sample.response_ids):  # type: ignore[arg-type]
        sample.loss_mask = [int(v) for v in mask]  # type: ignore[union-attr]
    return sample
