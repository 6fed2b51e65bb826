"""`LitAgentRunner`: runs a `LitAgent` rollout by rollout under a tracer and reports to a store."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Optional, TypeVar

from agentlightning.emitter import find_final_reward
from agentlightning.instrumentation.openai_clients import install_safe_client_finalizers
from agentlightning.store.transitions import StaleAttemptError
from agentlightning.types import (
    AttemptedRollout,
    AttemptStatus,
    Hook,
    NamedResources,
    Rollout,
    RolloutMode,
    Span,
    SpanCoreFields,
)

from .base import Runner, StopEvent
from .failures import log_failure
from .heartbeat import HEARTBEAT_LAUNCH_MODES, WorkerHeartbeat
from .results import ZERO_LLM_SPANS_HINT, RolloutResults, SpanList

if TYPE_CHECKING:
    from agentlightning.litagent import LitAgent
    from agentlightning.store.base import LightningStore
    from agentlightning.tracer.base import Tracer

__all__ = ["LitAgentRunner", "ZERO_LLM_SPANS_HINT"]

logger = logging.getLogger(__name__)

T_task = TypeVar("T_task")

# How often an idle runner re-checks its stop event while waiting for the next poll.
STOP_CHECK_INTERVAL_SECONDS = 0.1


class LitAgentRunner(RolloutResults[T_task], Runner[T_task]):
    """Runs a `LitAgent` against a `LightningStore`, tracing each rollout with `tracer`.

    Per rollout: `on_rollout_start` hooks -> `tracer.trace_context(...)` -> `on_trace_start` hooks ->
    the agent (training variant when `rollout.mode == "train"`, validation variant otherwise) ->
    `on_trace_end` hooks -> context closes -> the return value is stored (float -> reward span, list ->
    spans) -> `on_rollout_end` hooks -> the attempt is marked `succeeded`, or `failed` if anything raised
    (the exception is also stored as an `agentlightning.exception` span). Hook errors are logged and never
    stop the runner.

    Synchronous agents run on the event loop's thread, like plain function calls (so `signal`-based
    timeouts keep working), except when the loop has to keep serving something meanwhile: with
    `heartbeat_launch_mode="asyncio"` inside `iter()` they run in a worker thread. Set
    `sync_agent_in_thread` to True/False to force either.
    """

    sync_agent_in_thread: Optional[bool] = None

    def __init__(
        self,
        tracer: Tracer,
        max_rollouts: Optional[int] = None,
        poll_interval: float = 5.0,
        heartbeat_interval: float = 10.0,
        interval_jitter: float = 0.5,
        heartbeat_launch_mode: Literal["thread", "asyncio"] = "thread",
        heartbeat_include_gpu: bool = False,
    ) -> None:
        super().__init__()
        if max_rollouts is not None and max_rollouts < 0:
            raise ValueError(f"max_rollouts must be None (no limit) or >= 0, got {max_rollouts}")
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be > 0 seconds, got {poll_interval}")
        if interval_jitter < 0:
            raise ValueError(f"interval_jitter must be >= 0 seconds, got {interval_jitter}")
        if heartbeat_launch_mode not in HEARTBEAT_LAUNCH_MODES:
            raise ValueError(
                f"heartbeat_launch_mode must be one of {HEARTBEAT_LAUNCH_MODES}, got {heartbeat_launch_mode!r}"
            )
        self._tracer = tracer
        self._max_rollouts = max_rollouts
        self._poll_interval = poll_interval
        self._heartbeat_interval = heartbeat_interval
        self._interval_jitter = interval_jitter
        self._heartbeat_launch_mode: Literal["thread", "asyncio"] = heartbeat_launch_mode
        self._heartbeat_include_gpu = heartbeat_include_gpu
        self._agent: Optional[LitAgent[T_task]] = None
        self._hooks: list[Hook] = []
        self._store: Optional[LightningStore] = None
        # The current attempt's last batch of traced spans waits to travel with its final status, and so
        # does its exception span.
        self._trace_deferred = False
        self._deferred_spans: list[Span] = []
        self._sync_in_thread_now = False

    # ---- accessors ----

    @property
    def tracer(self) -> Tracer:
        return self._tracer

    def get_tracer(self) -> Tracer:
        return self._tracer

    def get_agent(self) -> LitAgent[T_task]:
        if self._agent is None:
            raise RuntimeError(f"{type(self).__name__} has no agent; call init(agent) or use run_context(agent=...)")
        return self._agent

    def get_store(self) -> LightningStore:
        if self._store is None:
            raise RuntimeError(
                f"{type(self).__name__} has no store; call init_worker(worker_id, store) or use run_context(store=...)"
            )
        return self._store

    def get_worker_id(self) -> str:
        """The id this runner reports to the store: `Worker-<worker_id>` (or `Worker-Unknown`)."""
        return f"Worker-{self.worker_id}" if self.worker_id is not None else "Worker-Unknown"

    # ---- lifecycle ----

    def init(self, agent: LitAgent[T_task], *, hooks: Optional[Sequence[Hook]] = None, **kwargs: Any) -> None:
        """Link `agent` to this runner, register `hooks` and initialise the tracer."""
        self._agent = agent
        agent.set_runner(self)
        self._hooks = list(hooks) if hooks is not None else []
        self._tracer.init()

    def init_worker(self, worker_id: int, store: LightningStore, **kwargs: Any) -> None:  # type: ignore[override]
        """Bind worker `worker_id` to `store` (also for the tracer)."""
        # Agents leak async SDK clients; their default finalizer can strand this worker's next LLM call.
        install_safe_client_finalizers()
        self.worker_id = worker_id
        self._store = store
        self._tracer.init_worker(worker_id, store)

    def teardown_worker(self, worker_id: int, *args: Any, **kwargs: Any) -> None:
        self._tracer.teardown_worker(worker_id)
        self._store = None

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        self._tracer.teardown()
        self._hooks = []
        self._agent = None

    # ---- running ----

    async def iter(self, *, event: Optional[StopEvent] = None) -> None:
        """Dequeue and run rollouts until `event` is set or `max_rollouts` were processed."""
        store = self.get_store()
        worker_id = self.get_worker_id()
        heartbeat = WorkerHeartbeat(
            store,
            worker_id,
            interval=self._heartbeat_interval,
            jitter=self._interval_jitter,
            launch_mode=self._heartbeat_launch_mode,
            include_gpu=self._heartbeat_include_gpu,
        )
        processed = 0
        await heartbeat.start()
        self._sync_in_thread_now = heartbeat.enabled and self._heartbeat_launch_mode == "asyncio"
        try:
            while not (event is not None and event.is_set()):
                if self._max_rollouts is not None and processed >= self._max_rollouts:
                    logger.info("%s processed %d rollout(s), reaching max_rollouts; stopping.", worker_id, processed)
                    break
                try:
                    rollout = await self._next_rollout(store, worker_id, event)
                except (PermissionError, ValueError, KeyError, TypeError, ConnectionError):
                    # A refused token or request cannot succeed when asked again, and a store client raises
                    # ConnectionError only once its retry budget is spent: stop the runner with the error.
                    raise
                except Exception:
                    logger.exception("%s could not dequeue a rollout; retrying after the poll interval.", worker_id)
                    await self._idle(event)
                    continue
                if rollout is None:
                    continue
                await self._run_attempt(rollout, raise_on_error=False)
                processed += 1
        finally:
            self._sync_in_thread_now = False
            await heartbeat.stop()

    async def step(
        self,
        input: T_task,
        *,
        resources: Optional[NamedResources] = None,
        mode: Optional[RolloutMode] = None,
        event: Optional[StopEvent] = None,
    ) -> Rollout:
        """Run one rollout of `input` now and return it in its final state; raises what the agent raised.

        Given `resources` are added to the store first and used for this rollout; otherwise the store's
        latest resources are used. `event` is accepted for symmetry with `iter` and not consulted.
        """
        store = self.get_store()
        resources_id: Optional[str] = None
        if resources is not None:
            resources_id = (await store.add_resources(resources)).resources_id
        attempted = await store.start_rollout(
            input=input, mode=mode, resources_id=resources_id, worker_id=self.get_worker_id()
        )
        await self._run_attempt(attempted, raise_on_error=True)
        final = await store.get_rollout_by_id(attempted.rollout_id)
        if final is None:
            raise RuntimeError(f"rollout {attempted.rollout_id!r} vanished from {type(store).__name__} after it ran")
        return final

    async def _next_rollout(
        self, store: LightningStore, worker_id: str, event: Optional[StopEvent]
    ) -> Optional[AttemptedRollout]:
        """Claim the next rollout, waiting up to `poll_interval` for one to be enqueued (None if none came).

        The store wakes the wait on enqueue (no fixed sleep); the stop event is checked every
        `STOP_CHECK_INTERVAL_SECONDS` and ends the wait early.
        """

        async def claim_one() -> tuple[list[AttemptedRollout], contextvars.Context]:
            claimed = await store.wait_for_dequeue(timeout=self._poll_interval, worker_id=worker_id, run=self.run_name)
            return claimed, contextvars.copy_context()

        claim = asyncio.ensure_future(claim_one())
        try:
            while not claim.done():
                await asyncio.wait([claim], timeout=STOP_CHECK_INTERVAL_SECONDS)
                if not claim.done() and event is not None and event.is_set():
                    claim.cancel()
                    await asyncio.wait([claim])  # a claim that completed meanwhile is still run
        finally:
            if not claim.done():  # this runner itself is cancelled
                claim.cancel()
        if claim.cancelled():
            return None
        claimed, context = claim.result()
        _adopt_context(context)
        return claimed[0] if claimed else None

    async def _idle(self, event: Optional[StopEvent]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._poll_interval
        while not (event is not None and event.is_set()):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            await asyncio.sleep(min(STOP_CHECK_INTERVAL_SECONDS, remaining))

    # ---- one attempt ----

    async def _run_attempt(self, rollout: AttemptedRollout, *, raise_on_error: bool) -> None:
        store = self.get_store()
        agent = self.get_agent()
        rollout_id, attempt_id = rollout.rollout_id, rollout.attempt.attempt_id
        started = time.time()
        spans: SpanList = []
        error: Optional[BaseException] = None
        try:
            await self._call_hooks("on_rollout_start", agent=agent, runner=self, rollout=rollout)
            resources = await self._resolve_resources(rollout)
            result, traced_reward = await self._trace_agent(agent, rollout, resources)
            spans = await self._post_process(rollout, result, traced_reward)
            self._log_completion(rollout, spans, started)
            await self._check_llm_spans(rollout, resources, spans)
        except BaseException as exc:  # also cancellation: the attempt must not be left running
            error = exc
            if isinstance(exc, Exception):
                if raise_on_error:
                    logger.debug("%s: rollout %s attempt %s failed.", self.get_worker_id(), rollout_id, attempt_id)
                else:
                    log_failure(logger, rollout_id, f"{self.get_worker_id()}, attempt {attempt_id}", exc)
                if not spans:
                    spans = self._captured_spans(rollout)
                exception_span = await self._store_exception(rollout, exc)
                if exception_span is not None:
                    spans = [*spans, exception_span]  # type: ignore[list-item]
        await self._call_hooks("on_rollout_end", agent=agent, runner=self, rollout=rollout, spans=spans)
        status: AttemptStatus = "failed" if error is not None else "succeeded"
        try:
            if self._trace_deferred:  # the last spans and the status in one call
                self._trace_deferred = False
                extra, self._deferred_spans = self._deferred_spans, []
                await self._otel_tracer().finish_last_trace(status, extra)
            else:
                await store.update_attempt(rollout_id, attempt_id, status=status)
        except StaleAttemptError as exc:  # the store gave up on this attempt (timeout / silence) and moved on
            logger.warning(
                "%s: result of rollout %s attempt %s discarded: %s", self.get_worker_id(), rollout_id, attempt_id, exc
            )
        except Exception:
            logger.exception(
                "%s could not finalise rollout %s attempt %s.", self.get_worker_id(), rollout_id, attempt_id
            )
        if error is not None and (raise_on_error or not isinstance(error, Exception)):
            raise error

    async def _resolve_resources(self, rollout: Rollout) -> NamedResources:
        store = self.get_store()
        if rollout.resources_id:
            update = await store.get_resources_by_id(rollout.resources_id)
            if update is None:
                raise ValueError(
                    f"rollout {rollout.rollout_id!r} refers to resources {rollout.resources_id!r}, which are not in "
                    f"the store; add them with store.add_resources()/update_resources() before enqueueing"
                )
            return update.resources
        update = await store.get_latest_resources()
        if update is None:
            logger.debug("rollout %s runs without resources: the store has none.", rollout.rollout_id)
            return {}
        return update.resources

    async def _trace_agent(
        self, agent: LitAgent[T_task], rollout: AttemptedRollout, resources: NamedResources
    ) -> tuple[Any, Optional[SpanCoreFields]]:
        """Run the agent in a trace context; returns its result and the reward span recorded through the tracer."""
        tracer = self._tracer
        defer = self._defers_last_batch()
        context = (
            self._otel_tracer().trace_context(
                name=rollout.rollout_id,
                rollout_id=rollout.rollout_id,
                attempt_id=rollout.attempt.attempt_id,
                defer_last_batch=True,
            )
            if defer
            else tracer.trace_context(
                name=rollout.rollout_id, rollout_id=rollout.rollout_id, attempt_id=rollout.attempt.attempt_id
            )
        )
        async with context:
            self._trace_deferred = defer  # set inside: a context that failed to open defers nothing
            await self._call_hooks("on_trace_start", agent=agent, runner=self, tracer=tracer, rollout=rollout)
            try:
                result = await self._invoke_agent(agent, rollout, resources)
            finally:
                await self._call_hooks("on_trace_end", agent=agent, runner=self, tracer=tracer, rollout=rollout)
            result = self._coerce_reward(result)
            return result, self._trace_reward(result) if isinstance(result, float) else None

    async def _invoke_agent(self, agent: LitAgent[T_task], rollout: AttemptedRollout, resources: NamedResources) -> Any:
        training = rollout.mode == "train"
        if agent.is_async():
            method = agent.training_rollout_async if training else agent.validation_rollout_async
            return await method(rollout.input, resources, rollout)
        sync_method = agent.training_rollout if training else agent.validation_rollout
        in_thread = self.sync_agent_in_thread if self.sync_agent_in_thread is not None else self._sync_in_thread_now
        if in_thread:
            # to_thread copies the context, so the open trace context still captures the agent's spans.
            return await asyncio.to_thread(sync_method, rollout.input, resources, rollout)
        return sync_method(rollout.input, resources, rollout)

    def _log_completion(self, rollout: AttemptedRollout, spans: SpanList, started: float) -> None:
        if not logger.isEnabledFor(logging.INFO):
            return
        try:
            reward = find_final_reward(spans)
        except Exception:
            reward = None
        logger.info(
            "[%s | Rollout %s] Completed in %.2fs with %d span(s). Final reward: %s",
            self.get_worker_id(),
            rollout.rollout_id,
            time.time() - started,
            len(spans),
            reward,
        )

    async def _call_hooks(self, name: str, **kwargs: Any) -> None:
        for hook in self._hooks:
            try:
                result = getattr(hook, name)(**kwargs)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                logger.exception("hook %s.%s raised; the runner carries on.", type(hook).__name__, name)


def _adopt_context(context: contextvars.Context) -> None:
    """Take over the context variables a claim set in its own task, as if this task had claimed itself.

    An HTTP client notes there the resources versions its dequeue answer reported, so that the rollout's
    resources read is answered from its cache instead of another request.
    """
    for variable, value in context.items():
        if variable.get(_NO_VALUE) is not value:
            variable.set(value)


_NO_VALUE: Any = object()
