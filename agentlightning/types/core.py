"""Core data types: rollouts, attempts, workers, triplets, pagination and filters.

v0.3 defined `Hook` here; it lives in `types/hooks.py` now and `agentlightning.types.core.Hook` still resolves.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import (
    Any,
    Generic,
    Literal,
    Optional,
    Protocol,
    TypedDict,
    TypeVar,
    Union,
    overload,
    runtime_checkable,
)

from opentelemetry.sdk.trace import ReadableSpan
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .tracer import Span, SpanCoreFields

__all__ = [
    "Triplet",
    "RolloutLegacy",
    "Task",
    "TaskInput",
    "TaskIfAny",
    "RolloutRawResultLegacy",
    "RolloutRawResult",
    "RolloutMode",
    "GenericResponse",
    "ParallelWorkerBase",
    "Dataset",
    "AttemptStatus",
    "RolloutStatus",
    "RolloutConfig",
    "Rollout",
    "Attempt",
    "AttemptedRollout",
    "FinishedAttempt",
    "EnqueueRolloutRequest",
    "Worker",
    "WorkerStatus",
    "PaginatedResult",
    "FilterOptions",
    "SortOptions",
    "FilterField",
    "ROLLOUT_STATUSES",
    "ATTEMPT_STATUSES",
    "ROLLOUT_MODES",
    "WORKER_STATUSES",
    "TERMINAL_ROLLOUT_STATUSES",
    "QUEUING_ROLLOUT_STATUSES",
    "DEFAULT_TIMEOUT_SECONDS",
    "DEFAULT_UNRESPONSIVE_SECONDS",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

TaskInput = Any
RolloutMode = Literal["train", "val", "test"]
RolloutStatus = Literal["queuing", "preparing", "running", "failed", "succeeded", "cancelled", "requeuing"]
AttemptStatus = Literal["preparing", "running", "failed", "succeeded", "unresponsive", "timeout"]
WorkerStatus = Literal["idle", "busy", "unknown"]

ROLLOUT_MODES: tuple[str, ...] = ("train", "val", "test")
ROLLOUT_STATUSES: tuple[str, ...] = (
    "queuing",
    "preparing",
    "running",
    "failed",
    "succeeded",
    "cancelled",
    "requeuing",
)
ATTEMPT_STATUSES: tuple[str, ...] = ("preparing", "running", "failed", "succeeded", "unresponsive", "timeout")
WORKER_STATUSES: tuple[str, ...] = ("idle", "busy", "unknown")
TERMINAL_ROLLOUT_STATUSES: frozenset[str] = frozenset({"failed", "succeeded", "cancelled"})
QUEUING_ROLLOUT_STATUSES: frozenset[str] = frozenset({"queuing", "requeuing"})


class Triplet(BaseModel):
    """One LLM call as a training sample: what went in, what came out, and its reward."""

    prompt: Any
    response: Any
    reward: Optional[float] = None
    metadata: dict[str, Any] = Field(default_factory=dict)


#: An attempt still live this long after it started is marked `timeout` (then failed or retried).
DEFAULT_TIMEOUT_SECONDS = 3600.0
#: An attempt without a span or a heartbeat for this long is marked `unresponsive`: a runner heartbeats its
#: worker every 10 s by default, and that heartbeat counts for the attempt it works on, so only a runner that
#: died (or hangs without heartbeats) gets there.
DEFAULT_UNRESPONSIVE_SECONDS = 300.0


class RolloutConfig(BaseModel):
    """How long an attempt may take and when a rollout is retried.

    The defaults bound every attempt, so a killed runner never leaves a rollout running forever (and
    `Trainer.fit` waiting for it); `None` turns a limit off.
    """

    # Positive and finite when set; None means no limit.
    timeout_seconds: Optional[float] = Field(default=DEFAULT_TIMEOUT_SECONDS, gt=0, allow_inf_nan=False)
    unresponsive_seconds: Optional[float] = Field(default=DEFAULT_UNRESPONSIVE_SECONDS, gt=0, allow_inf_nan=False)
    max_attempts: int = Field(default=1, ge=1)
    retry_condition: list[AttemptStatus] = Field(default_factory=list)


class Rollout(BaseModel):
    """A task to run, its status, and the resources version it runs with."""

    rollout_id: str
    input: TaskInput
    start_time: float
    end_time: Optional[float] = None
    mode: Optional[RolloutMode] = None
    resources_id: Optional[str] = None
    status: RolloutStatus = "queuing"
    config: RolloutConfig = Field(default_factory=RolloutConfig)
    metadata: Optional[dict[str, Any]] = None

    def is_terminal(self) -> bool:
        return self.status in TERMINAL_ROLLOUT_STATUSES


class Attempt(BaseModel):
    """One execution of a rollout by a worker."""

    rollout_id: str
    attempt_id: str
    sequence_id: int
    start_time: float
    end_time: Optional[float] = None
    status: AttemptStatus = "preparing"
    worker_id: Optional[str] = None
    last_heartbeat_time: Optional[float] = None
    metadata: Optional[dict[str, Any]] = None


class AttemptedRollout(Rollout):
    """A rollout together with its latest attempt."""

    attempt: Attempt

    @model_validator(mode="after")
    def _attempt_belongs_to_rollout(self) -> AttemptedRollout:
        if self.attempt.rollout_id != self.rollout_id:
            raise ValueError(
                f"attempt {self.attempt.attempt_id!r} belongs to rollout {self.attempt.rollout_id!r}, "
                f"not {self.rollout_id!r}"
            )
        return self


class FinishedAttempt(BaseModel):
    """What `LightningStore.finish_attempt` stored: the attempt in its final state and its last spans."""

    attempt: Attempt
    spans: list[Span]


class EnqueueRolloutRequest(BaseModel):
    """The caller-chosen fields of a rollout, for bulk enqueue."""

    input: TaskInput
    mode: Optional[RolloutMode] = None
    resources_id: Optional[str] = None
    config: Optional[RolloutConfig] = None
    metadata: Optional[dict[str, Any]] = None


class Worker(BaseModel):
    """A runner worker as the store sees it through heartbeats and dequeues."""

    worker_id: str
    status: WorkerStatus = "unknown"
    heartbeat_stats: Optional[dict[str, Any]] = None
    last_heartbeat_time: Optional[float] = None
    last_dequeue_time: Optional[float] = None
    last_busy_time: Optional[float] = None
    last_idle_time: Optional[float] = None
    current_rollout_id: Optional[str] = None
    current_attempt_id: Optional[str] = None


class FilterField(TypedDict, total=False):
    """Conditions on one field: exact match, membership, or substring."""

    exact: Any
    within: Sequence[Any]
    contains: str


# field name -> FilterField, plus "_aggregate": "and" | "or" and "_must": FilterOptions (always ANDed).
FilterOptions = Mapping[str, Any]


class SortOptions(TypedDict):
    name: str
    order: Literal["asc", "desc"]


class PaginatedResult(BaseModel, Generic[T]):
    """A page of results; `total` counts all matches before paging. A `collections.abc.Sequence` of `items`."""

    items: list[T]
    limit: int
    offset: int
    total: int

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[T]:  # type: ignore[override]
        return iter(self.items)

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> list[T]: ...
    def __getitem__(self, index: Union[int, slice]) -> Union[T, list[T]]:
        return self.items[index]

    def __bool__(self) -> bool:
        return bool(self.items)

    def __contains__(self, value: object) -> bool:
        return value in self.items

    def __reversed__(self) -> Iterator[T]:
        return reversed(self.items)

    def index(self, value: Any, start: int = 0, stop: Optional[int] = None) -> int:
        return self.items.index(value, start, len(self.items) if stop is None else stop)

    def count(self, value: Any) -> int:
        return self.items.count(value)


# A page is a read-only sequence of its items (v0.3 code checks `isinstance(page, Sequence)`).
Sequence.register(PaginatedResult)  # pyright: ignore[reportAttributeAccessIssue]  # ABCMeta.register


@runtime_checkable
class Dataset(Protocol, Generic[T_co]):
    """Anything indexable with a length; a list works."""

    def __getitem__(self, index: int, /) -> T_co: ...

    def __len__(self) -> int: ...


class ParallelWorkerBase:
    """Lifecycle shared by components that run once per process and once per worker."""

    def __init__(self) -> None:
        self.worker_id: Optional[int] = None

    def init(self, *args: Any, **kwargs: Any) -> None:
        """Called once before any worker starts."""

    def init_worker(self, worker_id: int, *args: Any, **kwargs: Any) -> None:
        self.worker_id = worker_id

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Main work of the component; subclasses override."""

    def teardown_worker(self, worker_id: int, *args: Any, **kwargs: Any) -> None:
        """Called once per worker after it stops."""

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        """Called once after all workers stopped."""


RolloutRawResult = Union[None, float, list[ReadableSpan], list[Span], list[SpanCoreFields]]


# ---- Legacy (v0.1) types, kept for the deprecated client/server API ----


class Task(BaseModel):
    rollout_id: str
    input: TaskInput
    mode: Optional[RolloutMode] = None
    resources_id: Optional[str] = None
    create_time: Optional[float] = None
    last_claim_time: Optional[float] = None
    num_claims: Optional[int] = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class TaskIfAny(BaseModel):
    is_available: bool
    task: Optional[Task] = None


class RolloutLegacy(BaseModel):
    model_config = ConfigDict(extra="allow")

    rollout_id: str
    task: Optional[Task] = None
    final_reward: Optional[float] = None
    triplets: Optional[list[Triplet]] = None
    trace: Optional[list[dict[str, Any]]] = None
    logs: Optional[list[str]] = None
    metadata: dict[str, Any] = Field(default_factory=dict)


RolloutRawResultLegacy = Union[None, float, list[Triplet], list[dict[str, Any]], list[ReadableSpan], RolloutLegacy]


class GenericResponse(BaseModel):
    status: str = "success"
    message: Optional[str] = None
    data: Optional[dict[str, Any]] = None


def __getattr__(name: str) -> Any:
    # v0.3's `agentlightning.types.core.Hook`: the class lives in `types/hooks.py` (which imports this module),
    # and the package's `__init__` has loaded it before any attribute of this module can be asked for.
    if name == "Hook":
        return sys.modules["agentlightning.types.hooks"].Hook
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
