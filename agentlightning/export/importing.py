"""Exported rows back into a store, all or nothing: every row is checked before anything is written.

A file that is not a trajectory export, or any row in it that could not be imported as it is (a wrong type,
a token id outside int64, a mask as long as nothing, a NaN reward, a task that is not JSON), is refused
with a `ValueError` naming the row and the field, and nothing is written. Each rollout is then written as
one finished attempt (`finish_attempt` with all its spans); should the store itself fail on the way, the
rollout being written is marked failed, so no rollout is ever left running. Rollouts already in the store
(imported before from the same exported rollout id, or that very rollout) are skipped, so importing a file
again changes nothing and finishes an import an error interrupted.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentlightning.attributes.genai import AGL_LOSS_MASK, AGL_TOKEN_IDS_SOURCE
from agentlightning.store._finite import check_finite
from agentlightning.store.base import LightningStore
from agentlightning.types import AUTO_SEQUENCE_ID, Span

__all__ = ["IMPORTED_FROM", "ImportReport", "ImportRow", "check_rows", "import_rows"]

IMPORTED_FROM = "imported_from"
_LLM_SPAN = "openai.chat.completion"
_MAX_REPORTED = 10

INT64_MAX = 2**63 - 1
Text = Annotated[str, Field(pattern="^[^\\x00]*$")]  # PostgreSQL text cannot hold NUL
TokenId = Annotated[int, Field(ge=0, le=INT64_MAX)]
Int64 = Annotated[int, Field(ge=-INT64_MAX - 1, le=INT64_MAX)]
Finite = Annotated[float, Field(allow_inf_nan=False)]


class ImportRow(BaseModel):
    """The columns of an exported row that an import reads (the others are derived from these)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    rollout_id: Annotated[Text, Field(min_length=1, max_length=200)]
    group_id: Text
    row_index: Annotated[int, Field(ge=0, le=2**31 - 1)]
    mode: Optional[Literal["train", "val", "test"]] = None
    step: Optional[Int64] = None
    task: Optional[Text] = None
    prompt_ids: list[TokenId]
    completion_ids: list[TokenId]
    completion_logprobs: Optional[list[Finite]] = None
    completion_loss_mask: list[Literal[0, 1]]
    reward: Optional[Finite] = None  # null: the rollout is imported without a reward
    policy_version: Optional[Int64] = None
    token_ids_source: Optional[Literal["recorded", "retokenized"]] = None
    prompt: Optional[Text] = None
    completion: Optional[Text] = None

    @field_validator("task")
    @classmethod
    def _json_task(cls, value: Optional[str]) -> Optional[str]:
        if value:
            task_of(value)
        return value

    @model_validator(mode="after")
    def _lengths(self) -> ImportRow:
        n = len(self.completion_ids)
        if len(self.completion_loss_mask) != n:
            raise ValueError(f"completion_loss_mask has {len(self.completion_loss_mask)} values for {n} completion_ids")
        if self.completion_logprobs is not None and len(self.completion_logprobs) != n:
            raise ValueError(f"completion_logprobs has {len(self.completion_logprobs)} values for {n} completion_ids")
        return self


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def task_of(text: str) -> Any:
    """The rollout input a `task` column holds (ValueError when it is not JSON a store can keep)."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("task nests too deeply to be read as JSON") from None
    except ValueError as exc:
        raise ValueError(f"task is not JSON ({exc})") from None
    check_finite(value, "task")
    return value


def _describe(error: Mapping[str, Any]) -> str:
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.get("loc", ())).lstrip(".")
    message = str(error.get("msg", "invalid"))
    value = error.get("input")
    if where and not isinstance(value, (dict, list)) and len(repr(value)) <= 80:
        message += f" (got {value!r})"
    return f"{where or 'row'}: {message}"


def check_rows(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[ImportRow]]:
    """The rows by exported rollout id, each rollout's rows in order; ValueError naming every bad row (first 10)."""
    problems: list[str] = []
    by_rollout: dict[str, list[ImportRow]] = {}
    for number, raw in enumerate(rows):
        label = f"row {number}"
        if isinstance(raw, Mapping) and isinstance(raw.get("rollout_id"), str):
            label += f" (rollout {raw['rollout_id']!r})"
        try:
            row = ImportRow.model_validate(dict(raw))
        except ValidationError as exc:
            problems.extend(f"{label}: {_describe(e)}" for e in exc.errors())  # type: ignore[arg-type]
            continue
        by_rollout.setdefault(row.rollout_id, []).append(row)
    for rollout_id, own in by_rollout.items():
        own.sort(key=lambda r: r.row_index)
        indexes = [r.row_index for r in own]
        if len(set(indexes)) != len(indexes):
            problems.append(f"rollout {rollout_id!r}: row_index values repeat ({indexes})")
    if problems:
        more = f"; and {len(problems) - _MAX_REPORTED} more" if len(problems) > _MAX_REPORTED else ""
        raise ValueError("nothing imported: " + "; ".join(problems[:_MAX_REPORTED]) + more)
    return by_rollout


def _call_span_attributes(row: ImportRow) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.system": "agentlightning.import",
        "gen_ai.request.type": "chat",
        "prompt_token_ids": list(row.prompt_ids),
        "response_token_ids": list(row.completion_ids),
        AGL_LOSS_MASK: list(row.completion_loss_mask),
        AGL_TOKEN_IDS_SOURCE: row.token_ids_source or "recorded",
    }
    if row.completion_logprobs is not None:
        attributes["logprobs.content"] = json.dumps([{"logprob": v} for v in row.completion_logprobs])
    if row.policy_version is not None:
        attributes["gen_ai.response.system_fingerprint"] = f"weights-v{row.policy_version}"
    if row.prompt is not None:
        attributes["gen_ai.prompt"] = row.prompt
    if row.completion is not None:
        attributes["gen_ai.completion"] = json.dumps([{"role": "assistant", "content": row.completion}])
    return attributes


@dataclass(frozen=True)
class ImportReport:
    """What an import did: `{exported rollout id: new rollout id}`, and the rollouts the store already had."""

    created: dict[str, str] = field(default_factory=dict[str, str])
    existing: dict[str, str] = field(default_factory=dict[str, str])


async def _present(store: LightningStore) -> dict[str, str]:
    """Exported rollout id -> the store's rollout holding it (imported and succeeded, or that rollout itself)."""
    present: dict[str, str] = {}
    for rollout in await store.query_rollouts():
        present.setdefault(rollout.rollout_id, rollout.rollout_id)
        origin = (rollout.metadata or {}).get(IMPORTED_FROM)
        if isinstance(origin, str) and rollout.status == "succeeded":
            present[origin] = rollout.rollout_id
    return present


async def import_rows(store: LightningStore, rows: Sequence[Mapping[str, Any]]) -> ImportReport:
    """Write exported rows into `store` as finished rollouts (see the module docs: all rows are checked first)."""
    by_rollout = check_rows(rows)
    present = await _present(store)
    report = ImportReport()
    for old_id, own in by_rollout.items():
        if old_id in present:
            report.existing[old_id] = present[old_id]
            continue
        report.created[old_id] = await _write_rollout(store, old_id, own)
    return report


async def _write_rollout(store: LightningStore, old_id: str, own: list[ImportRow]) -> str:
    first = own[0]
    metadata: dict[str, Any] = {IMPORTED_FROM: old_id, "group_id": first.group_id}
    if first.step is not None:
        metadata["grpo_step"] = first.step
    task = task_of(first.task) if first.task else None
    attempted = await store.start_rollout(input=task, mode=first.mode, metadata=metadata)
    rollout_id, attempt_id = attempted.rollout_id, attempted.attempt.attempt_id
    clock = attempted.start_time
    spans: list[Span] = []
    named = [(_LLM_SPAN, _call_span_attributes(row)) for row in own]
    if first.reward is not None:
        named.append(("agentlightning.reward", {"agentlightning.reward.0.name": "primary",
                                                "agentlightning.reward.0.value": first.reward}))  # fmt: skip
    for name, attributes in named:
        spans.append(
            Span.from_attributes(
                attributes=attributes,
                rollout_id=rollout_id,
                attempt_id=attempt_id,
                sequence_id=AUTO_SEQUENCE_ID,
                name=name,
                start_time=clock,
                end_time=clock + 5e-4,
            )
        )
        clock += 1e-3
    try:
        await store.finish_attempt(rollout_id, attempt_id, "succeeded", spans)
    except BaseException:
        with contextlib.suppress(Exception):  # the store is failing: leave nothing running where it still answers
            await store.update_attempt(rollout_id, attempt_id, status="failed")
        raise
    return rollout_id
