"""Deprecated `LegacyAgentRunner`: the v0.1 worker loop over an `AgentLightningClient` instead of a store."""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional, Protocol, TypeVar

from opentelemetry.sdk.trace import ReadableSpan

from agentlightning.emitter import emit_reward, find_final_reward
from agentlightning.runner.agent import LitAgentRunner
from agentlightning.runner.base import StopEvent
from agentlightning.types import (
    Attempt,
    AttemptedRollout,
    NamedResources,
    ResourcesUpdate,
    Rollout,
    RolloutLegacy,
    RolloutMode,
    Span,
    Task,
    Triplet,
)
from agentlightning.utils.deprecation import warn_deprecated_once
from agentlightning.utils.id import generate_id

if TYPE_CHECKING:
    from agentlightning.litagent import LitAgent
    from agentlightning.store.base import LightningStore
    from agentlightning.tracer.base import Tracer

__all__ = ["LegacyAgentRunner"]

logger = logging.getLogger(__name__)

T_task = TypeVar("T_task")

TripletExporter = Callable[[list[Span]], list[Triplet]]
"""Spans of one rollout -> triplets; any trace adapter such as `TracerTraceToTriplet()` fits."""


class TaskClient(Protocol):
    """The v0.1 task server as the runner uses it; `agentlightning.client.AgentLightningClient` is one."""

    @property
    def poll_interval(self) -> float: ...

    async def poll_next_task_async(self, *, max_polls: Optional[int] = None) -> Optional[Task]: ...

    async def post_rollout_async(self, rollout: RolloutLegacy) -> Optional[dict[str, Any]]: ...

    async def get_resources_by_id_async(self, resource_id: str) -> Optional[ResourcesUpdate]: ...

    async def get_latest_resources_async(self) -> Optional[ResourcesUpdate]: ...


class LegacyAgentRunner(LitAgentRunner[T_task]):
    """Deprecated v0.1 runner: polls tasks from `client`, runs `agent` and posts one `RolloutLegacy` per task.

    Per task: resources (the task's version, else the latest) -> `agent.on_rollout_start` -> a local trace
    context (no store: the trace travels inside the posted rollout) -> the agent (training variant when
    `task.mode == "train"`) -> the result becomes a `RolloutLegacy` with the final reward, triplets from
    `triplet_exporter` and the spans as JSON -> `agent.on_rollout_end` -> post. An agent that raises still
    posts a rollout, without reward and with `metadata["error"]`. `Hook`s passed to `init` run as in
    `LitAgentRunner`. Stops after `max_tasks` tasks (None: never) or when `iter`'s event is set.
    """

    def __init__(
        self,
        agent: LitAgent[T_task],
        client: TaskClient,
        tracer: Tracer,
        triplet_exporter: Optional[TripletExporter] = None,
        worker_id: Optional[int] = None,
        max_tasks: Optional[int] = None,
    ) -> None:
        warn_deprecated_once(
            "LegacyAgentRunner",
            "LegacyAgentRunner is the deprecated v0.1 API; use agentlightning.LitAgentRunner with a "
            "LightningStore (or Trainer.fit) instead",
        )
        super().__init__(tracer=tracer, max_rollouts=max_tasks, poll_interval=client.poll_interval)
        self.client = client
        self.triplet_exporter = triplet_exporter
        self.max_tasks = max_tasks
        self.worker_id = worker_id
        self._agent = agent
        agent.set_runner(self)

    @property
    def agent(self) -> LitAgent[T_task]:
        return self.get_agent()

    def init_worker(self, worker_id: int, store: Optional[LightningStore] = None, **kwargs: Any) -> None:
        """Bind worker `worker_id`; the tracer records locally since results go to the server, not a store."""
        if store is not None:
            logger.warning("LegacyAgentRunner ignores the store it was given; results are posted to the client")
        self.worker_id = worker_id
        self._tracer.init_worker(worker_id, None)

    # ---- running ----

    async def iter(self, *, event: Optional[StopEvent] = None) -> None:
        """Poll, run and post tasks until `event` is set or `max_tasks` tasks were processed."""
        processed = 0
        while not (event is not None and event.is_set()):
            if self.max_tasks is not None and processed >= self.max_tasks:
                logger.info("%s processed %d task(s), reaching max_tasks; stopping.", self.get_worker_id(), processed)
                break
            task = await self.client.poll_next_task_async(max_polls=1)
            if task is None:
                await self._idle(event)
                continue
            rollout = await self._run_task(task, resources=None, raise_on_error=False)
            try:
                await self.client.post_rollout_async(rollout)
            except Exception:
                logger.exception(
                    "%s could not post rollout %s; the server will requeue its task after its timeout.",
                    self.get_worker_id(),
                    rollout.rollout_id,
                )
            processed += 1

    async def step(
        self,
        input: T_task,
        *,
        resources: Optional[NamedResources] = None,
        mode: Optional[RolloutMode] = None,
        event: Optional[StopEvent] = None,
    ) -> Rollout:
        """Run `input` now, without the server's queue and without posting; raises what the agent raised.

        Without `resources`, the client's latest resources are used. The `RolloutLegacy` that `iter` would
        have posted is in the returned rollout's `metadata["rollout_legacy"]`.
        """
        task = Task(rollout_id=f"ro-local-{generate_id(12)}", input=input, mode=mode, create_time=time.time())
        legacy = await self._run_task(task, resources=resources, raise_on_error=True)
        return Rollout(
            rollout_id=task.rollout_id,
            input=input,
            start_time=task.create_time or time.time(),
            end_time=time.time(),
            mode=mode,
            status="succeeded",
            metadata={"final_reward": legacy.final_reward, "rollout_legacy": legacy},
        )

    # ---- one task ----

    async def _run_task(
        self, task: Task, *, resources: Optional[NamedResources], raise_on_error: bool
    ) -> RolloutLegacy:
        agent = self.get_agent()
        rollout = _attempted_rollout(task, self.get_worker_id())
        started = time.time()
        spans: list[Span] = []
        error: Optional[Exception] = None
        try:
            agent.on_rollout_start(task, self, self._tracer)
            await self._call_hooks("on_rollout_start", agent=agent, runner=self, rollout=rollout)
            if resources is None:
                resources = await self._fetch_resources(task)
            result = await self._trace_locally(agent, rollout, resources, spans)
            legacy, spans = self._to_legacy_rollout(task, rollout, result, spans)
            self._log_completion(rollout, spans, started)
        except Exception as exc:
            error = exc
            log = logger.debug if raise_on_error else logger.exception
            log("%s: task %s failed.", self.get_worker_id(), task.rollout_id)
            legacy = RolloutLegacy(
                rollout_id=task.rollout_id,
                task=task,
                trace=[span.model_dump(mode="json") for span in spans],
                metadata={"error": f"{type(exc).__name__}: {exc}"},
            )
        try:
            agent.on_rollout_end(task, legacy, self, self._tracer)
        except Exception:
            logger.exception("%s.on_rollout_end raised; the runner carries on.", type(agent).__name__)
        await self._call_hooks("on_rollout_end", agent=agent, runner=self, rollout=rollout, spans=spans)
        if error is not None and raise_on_error:
            raise error
        return legacy

    async def _fetch_resources(self, task: Task) -> NamedResources:
        if task.resources_id:
            update = await self.client.get_resources_by_id_async(task.resources_id)
            if update is None:
                raise ValueError(
                    f"task {task.rollout_id!r} refers to resources {task.resources_id!r}, which the server does not "
                    "have; publish them with server.update_resources() before queueing the task"
                )
            return update.resources
        update = await self.client.get_latest_resources_async()
        if update is None:
            logger.debug("task %s runs without resources: the server has none.", task.rollout_id)
            return {}
        return update.resources

    async def _trace_locally(
        self, agent: LitAgent[T_task], rollout: AttemptedRollout, resources: NamedResources, sink: list[Span]
    ) -> Any:
        """Run the agent in a store-less trace context; its spans land in `sink` even when it raises."""
        tracer = self._tracer
        entered = False
        try:
            async with tracer.trace_context(name=rollout.rollout_id):
                entered = True
                await self._call_hooks("on_trace_start", agent=agent, runner=self, tracer=tracer, rollout=rollout)
                try:
                    return await self._invoke_agent(agent, rollout, resources)
                finally:
                    await self._call_hooks("on_trace_end", agent=agent, runner=self, tracer=tracer, rollout=rollout)
        finally:
            if entered:
                ids = {"rollout_id": rollout.rollout_id, "attempt_id": rollout.attempt.attempt_id}
                sink.extend(span.model_copy(update=ids) for span in tracer.get_last_trace())

    async def _invoke_agent(self, agent: LitAgent[T_task], rollout: AttemptedRollout, resources: NamedResources) -> Any:
        """Call the agent; a v0.1 `training_rollout(self, task, rollout_id, resources)` gets those arguments."""
        training = rollout.mode == "train"
        method: Callable[..., Any]
        if agent.is_async():
            method = agent.training_rollout_async if training else agent.validation_rollout_async
        else:
            method = agent.training_rollout if training else agent.validation_rollout
        if not takes_rollout_id(method):
            return await super()._invoke_agent(agent, rollout, resources)
        result = method(rollout.input, rollout_id=rollout.rollout_id, resources=resources)
        return await result if inspect.isawaitable(result) else result

    def _to_legacy_rollout(
        self, task: Task, rollout: AttemptedRollout, result: Any, captured: list[Span]
    ) -> tuple[RolloutLegacy, list[Span]]:
        """Turn what the agent returned (a `RolloutRawResultLegacy` or a span list) into the posted rollout."""
        if isinstance(result, RolloutLegacy):
            return result.model_copy(update={"rollout_id": task.rollout_id, "task": result.task or task}), captured
        rollout_id, attempt_id = rollout.rollout_id, rollout.attempt.attempt_id
        spans = captured
        final_reward: Optional[float] = None
        triplets: Optional[list[Triplet]] = None
        trace: Optional[list[dict[str, Any]]] = None
        if isinstance(result, (bool, int, float)):
            final_reward = float(result)
            # As a reward span, the adapter can attach the reward to the last LLM call, like LitAgentRunner does.
            core = emit_reward(final_reward, propagate=False)
            spans = [
                *captured,
                Span.from_core_fields(
                    core, rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=len(captured) + 1
                ),
            ]
        elif isinstance(result, list) and result:
            items: list[Any] = list(result)  # type: ignore[arg-type]
            if all(isinstance(item, Triplet) for item in items):
                triplets = items
            elif all(isinstance(item, dict) for item in items):
                trace = items
            elif all(isinstance(item, ReadableSpan) for item in items):
                spans = [Span.from_opentelemetry(item, rollout_id, attempt_id, i) for i, item in enumerate(items, 1)]
            elif all(isinstance(item, Span) for item in items):
                spans = items
            else:
                _warn_ignored(task, result)
        elif result is not None and not isinstance(result, list):
            _warn_ignored(task, result)

        metadata: dict[str, Any] = {}
        if triplets is None and self.triplet_exporter is not None and spans:
            triplets = self.triplet_exporter(spans)
            report = getattr(self.triplet_exporter, "last_report", None)
            if report is not None and hasattr(report, "to_metadata"):
                metadata["adaptation"] = report.to_metadata()
        if final_reward is None:
            final_reward = find_final_reward(spans)
        if final_reward is None and triplets:
            final_reward = triplets[-1].reward
        if trace is None:
            trace = [span.model_dump(mode="json") for span in spans]
        legacy = RolloutLegacy(
            rollout_id=task.rollout_id,
            task=task,
            final_reward=final_reward,
            triplets=triplets,
            trace=trace,
            metadata=metadata,
        )
        return legacy, spans


def _attempted_rollout(task: Task, worker_id: str) -> AttemptedRollout:
    """The v0.3 view of a v0.1 task, for agents and hooks that take a rollout."""
    now = time.time()
    claim = max(task.num_claims or 1, 1)
    attempt = Attempt(
        rollout_id=task.rollout_id,
        attempt_id=f"at-{generate_id(8)}",
        sequence_id=claim,
        start_time=now,
        status="running",
        worker_id=worker_id,
    )
    return AttemptedRollout(
        rollout_id=task.rollout_id,
        input=task.input,
        start_time=task.create_time or now,
        mode=task.mode,
        resources_id=task.resources_id,
        status="running",
        metadata=task.metadata,
        attempt=attempt,
    )


def _warn_ignored(task: Task, result: Any) -> None:
    logger.warning(
        "agent returned a %s for task %s, which is not a legacy rollout result (None, a float, a list of Triplets, "
        "trace dicts or spans, or a RolloutLegacy); ignoring it. Spans captured by the tracer are kept.",
        type(result).__name__,
        task.rollout_id,
    )


def takes_rollout_id(method: Callable[..., Any]) -> bool:
    """Whether a rollout method has v0.1's signature `(task, rollout_id, resources)` (v0.3's `is_v0_1_rollout_api`)."""
    try:
        return "rollout_id" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
