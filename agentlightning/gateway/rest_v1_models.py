"""Bodies and answers of v1.0's rollouts REST (`rest_v1.py`), declared so `/openapi.json` documents them.

Requests are validated here, so bad input is a 422 naming the field instead of a crash further down:
`config.timeout_seconds` must be a positive finite number; documents (`input`, `metadata`, `config.local`,
`config.k8s`) may hold no NaN or infinity (JSON has none, and the store refuses them) and nest at most
`MAX_DOCUMENT_DEPTH` levels; a client-chosen `rollout_id` is 1 to 200 characters without NUL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, ValidationInfo

from agentlightning.store._finite import check_finite

__all__ = [
    "MAX_DOCUMENT_DEPTH",
    "RolloutCreate",
    "RolloutDetail",
    "RolloutPatch",
    "StatusPatch",
    "TerminalItem",
    "TerminalPage",
    "V1Config",
    "V1Event",
    "V1Rollout",
    "V1State",
    "V1Status",
]

#: Deepest nesting of lists and objects accepted in a document (v1.0 inputs are dataset rows, a few levels deep).
MAX_DOCUMENT_DEPTH = 64
#: The longest numbers of seconds and counts the routes take (what a 64-bit integer holds).
MAX_INT64 = 2**63 - 1

V1State = Literal["queuing", "running", "succeeded", "failed"]


def _depth(value: Any, limit: int) -> int:
    """How deep `value` nests, counting no further than `limit + 1` (so a hostile value costs little)."""
    if limit < 0:
        return 1
    if isinstance(value, Mapping):
        children: Any = value.values()  # type: ignore[union-attr]
    elif isinstance(value, (list, tuple)):
        children = value
    else:
        return 0
    return 1 + max((_depth(child, limit - 1) for child in children), default=0)  # type: ignore[arg-type]


def _document(value: Any, info: ValidationInfo) -> Any:
    field = info.field_name or "value"
    if _depth(value, MAX_DOCUMENT_DEPTH) > MAX_DOCUMENT_DEPTH:
        raise ValueError(f"{field} nests deeper than {MAX_DOCUMENT_DEPTH} levels of lists/objects")
    check_finite(value, field)
    return value


def _json_number(value: Any) -> Any:
    """Refuse `true` and `"5"` where a number of seconds is due (lax validation would take them as 1 and 5)."""
    if isinstance(value, (bool, str)):
        raise ValueError(f"expected a number of seconds, got {type(value).__name__} {value!r}")
    return value


Document = Annotated[Any, AfterValidator(_document)]
Seconds = Annotated[Union[int, float], Field(gt=0, le=MAX_INT64, allow_inf_nan=False), BeforeValidator(_json_number)]
ClientId = Annotated[str, Field(min_length=1, max_length=200, pattern="^[^\\x00]*$")]


class V1Config(BaseModel):
    """v1.0's RolloutConfig: the rollout's timeout, and how a v1.0 controller would launch it."""

    timeout_seconds: Seconds = 3600
    local: Optional[Annotated[dict[str, Any], AfterValidator(_document)]] = None
    k8s: Optional[Annotated[dict[str, Any], AfterValidator(_document)]] = None


class RolloutCreate(BaseModel):
    """One rollout of `POST /api/rollouts`; a repeated `rollout_id` returns the rollout created first."""

    input: Document
    is_train: StrictBool = True
    config: Optional[V1Config] = None
    metadata: Optional[Annotated[dict[str, Any], AfterValidator(_document)]] = None
    rollout_id: Optional[ClientId] = None


class StatusPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    state: Optional[V1State] = None
    k8s_job_name: Optional[Annotated[str, Field(max_length=1000)]] = None
    last_attempt_id: Optional[Annotated[str, Field(max_length=1000)]] = None
    error_message: Optional[Annotated[str, Field(max_length=100_000)]] = None


class RolloutPatch(BaseModel):
    """`PATCH /api/rollouts/{id}`: only the fields sent are applied."""

    model_config = ConfigDict(extra="forbid")

    status: Optional[StatusPatch] = None


class V1Status(BaseModel):
    state: V1State
    k8s_job_name: Optional[str] = None
    last_attempt_id: Optional[str] = None
    error_message: Optional[str] = None
    version: int
    created_at: float
    updated_at: float


class V1Rollout(BaseModel):
    rollout_id: str
    input: Any
    is_train: bool
    config: dict[str, Any]
    metadata: dict[str, Any]
    status: V1Status


class RolloutDetail(BaseModel):
    rollout: V1Rollout
    attempts: list[str]


class TerminalItem(BaseModel):
    rollout_id: str
    state: V1State
    data_id: str
    is_train: bool


class TerminalPage(BaseModel):
    items: list[TerminalItem]
    next_after: int
    total_terminal: int


class V1Event(BaseModel):
    event_type: str
    rollout_id: str
    attempt_id: str
    timestamp: float
    data: dict[str, Any]
