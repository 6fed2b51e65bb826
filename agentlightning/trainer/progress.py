"""Progress of a `fit`/`dev` run while its algorithm waits, and an error when nothing can move any more.

Validation and training steps can take minutes without a log line the user sees (scripts often log at
WARNING). While the algorithm runs, `RunProgress` prints a line to stderr every `interval` seconds:
rollouts done per mode, failures, running and queued, and the algorithm's phase when it tells one
(GRPO: rollouts, learner update with micro-batches done and tokens/s, weight swap, evaluation). When the run's unfinished rollouts have not
moved for `stall_timeout` seconds (default 180, env `AGL_STALL_SECONDS`) and no runner can move them
(the runners holding them sent no heartbeat in that time, and none is alive to take the queued ones),
it raises `RunError` saying what it waited for, instead of waiting for ever.

A rollout held by a runner that died is not a stall while the store can still settle it: the store's
watchdog marks its attempt `unresponsive` once it was silent for `RolloutConfig.unresponsive_seconds`
(300 s by default) or `timeout` after `timeout_seconds`, then retries or fails it. The run waits for that
(plus `SETTLE_GRACE_SECONDS`), so the attempt ends as documented and the algorithm sees it.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Optional, TextIO, TypeVar

from agentlightning.env_var import LightningEnvVar, resolve_int_env_var
from agentlightning.execution.errors import RunError
from agentlightning.types import QUEUING_ROLLOUT_STATUSES, TERMINAL_ROLLOUT_STATUSES, AttemptedRollout

from .run_store import RunStore

__all__ = [
    "PROGRESS_INTERVAL_SECONDS",
    "SETTLE_GRACE_SECONDS",
    "STALL_TIMEOUT_SECONDS",
    "STALL_ENV",
    "RunProgress",
    "format_duration",
    "settled_by",
]

T = TypeVar("T")

PROGRESS_INTERVAL_SECONDS = 20.0
"""Seconds between progress lines (`Trainer(progress_interval=...)`; None or 0 prints none)."""

STALL_TIMEOUT_SECONDS = 180.0
"""Seconds without any rollout of the run moving, and no runner able to move one, before the run fails."""

STALL_ENV = LightningEnvVar.AGL_STALL_SECONDS.value

SETTLE_GRACE_SECONDS = 30.0
"""After a held attempt's silence limit or timeout, how long the store's watchdog gets to settle it."""

_CHECK_SECONDS = 2.0
_MODE_ORDER = {"train": 0, "val": 1, "test": 2}


def format_duration(seconds: float) -> str:
    """`42 s`, `3 min 05 s`, `1 h 02 min`."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def stall_timeout_from_env() -> float:
    return float(resolve_int_env_var(STALL_ENV, fallback=int(STALL_TIMEOUT_SECONDS)))


def settled_by(rollout: AttemptedRollout) -> Optional[float]:
    """When the store's watchdog ends the rollout's live attempt if its runner stays silent (epoch seconds):
    its silence limit after the last heartbeat, or its timeout, whichever comes first; None when it has neither."""
    attempt, config = rollout.attempt, rollout.config
    limits: list[float] = []
    if config.unresponsive_seconds is not None:
        since = attempt.last_heartbeat_time if attempt.last_heartbeat_time is not None else attempt.start_time
        limits.append(since + config.unresponsive_seconds)
    if config.timeout_seconds is not None:
        limits.append(attempt.start_time + config.timeout_seconds)
    return min(limits) if limits else None


class RunProgress:
    """Watches the rollouts created through `store` (the run's `RunStore`) while the algorithm runs."""

    def __init__(
        self,
        store: RunStore,
        *,
        algorithm_name: str,
        interval: Optional[float] = PROGRESS_INTERVAL_SECONDS,
        stall_timeout: Optional[float] = None,
        output: Optional[TextIO] = None,
        clock: Callable[[], float] = time.monotonic,
        check_every: float = _CHECK_SECONDS,
        phase: Optional[Callable[[], str]] = None,
    ) -> None:
        self.store = store
        self.algorithm_name = algorithm_name
        self.interval = interval if interval else None
        self.stall_timeout = stall_timeout_from_env() if stall_timeout is None else stall_timeout
        self.output = output
        self._clock = clock
        self._check_every = min(check_every, self.interval or check_every)
        self._started = clock()
        self._finished: dict[str, tuple[str, str]] = {}  # rollout id -> (mode, status), once terminal
        self._snapshot: Counter[tuple[str, str]] = Counter()
        self._holders: set[Optional[str]] = set()  # workers of the run's rollouts now preparing or running
        self._held: list[AttemptedRollout] = []  # those rollouts
        self._phase = phase
        """What the algorithm is doing (`GRPO.describe_phase`: learner update 3/4 micro-batches, ...)."""

    async def run_alongside(self, algorithm: Awaitable[T]) -> T:
        """Await `algorithm` while watching; a stall cancels it and raises `RunError`."""
        task = asyncio.ensure_future(algorithm)
        watcher = asyncio.ensure_future(self.watch())
        try:
            await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done() and watcher.done() and watcher.exception() is not None:
                raise watcher.exception()  # type: ignore[misc]
            return await task
        finally:
            for pending in (watcher, task):
                if not pending.done():
                    pending.cancel()
            await asyncio.gather(watcher, task, return_exceptions=True)

    async def watch(self) -> None:
        """Print progress lines and check for a stall until cancelled."""
        last_line = last_move = self._clock()
        while True:
            await asyncio.sleep(self._check_every)
            now = self._clock()
            try:
                moved = await self.refresh()
            except Exception:  # a store hiccup must not end the run; the algorithm sees real failures
                continue
            if moved:
                last_move = now
            if self.interval is not None and now - last_line >= self.interval:
                print(self.line(), file=self.output or sys.stderr, flush=True)
                last_line = now
            if self.stall_timeout > 0 and now - last_move >= self.stall_timeout and self.unfinished:
                if not await self._can_move():
                    raise RunError(self.stall_message())
                last_move = now  # a live runner holds a rollout: a long rollout, not a stall

    @property
    def unfinished(self) -> int:
        return sum(n for (_, status), n in self._snapshot.items() if status not in TERMINAL_ROLLOUT_STATUSES)

    async def refresh(self) -> bool:
        """Read the statuses of the run's unfinished rollouts; True when anything changed."""
        pending = [rid for rid in self.store.rollout_ids if rid not in self._finished]
        snapshot: Counter[tuple[str, str]] = Counter(self._finished.values())
        holders: set[Optional[str]] = set()
        held: list[AttemptedRollout] = []
        if pending:
            for rollout in await self.store.query_rollouts(rollout_id_in=pending):
                key = (rollout.mode or "unset", rollout.status)
                snapshot[key] += 1
                if rollout.status in TERMINAL_ROLLOUT_STATUSES:
                    self._finished[rollout.rollout_id] = key
                elif rollout.status not in QUEUING_ROLLOUT_STATUSES:
                    holders.add(rollout.attempt.worker_id if isinstance(rollout, AttemptedRollout) else None)
                    if isinstance(rollout, AttemptedRollout):
                        held.append(rollout)
        self._holders, self._held = holders, held
        moved = snapshot != self._snapshot
        self._snapshot = snapshot
        return moved

    async def _can_move(self) -> bool:
        """Whether a live runner holds one of the unfinished rollouts, or could take a queued one.

        A runner is live when it sent a heartbeat within the stall timeout. Runners that send none (their
        heartbeat is off) cannot be judged: a rollout they hold counts as moving. A rollout whose runner died
        moves too, until the store's watchdog had time to retry or fail its attempt (`settled_by`).
        """
        now = time.time()
        if any((by := settled_by(r)) is not None and now < by + SETTLE_GRACE_SECONDS for r in self._held):
            return True
        workers = {w.worker_id: w for w in await self.store.query_workers()}
        cutoff = now - self.stall_timeout
        live = {wid for wid, w in workers.items() if (w.last_heartbeat_time or 0.0) >= cutoff}
        if any(holder in live or holder not in workers for holder in self._holders):
            return True
        queued = sum(n for (_, s), n in self._snapshot.items() if s in QUEUING_ROLLOUT_STATUSES)
        return queued > 0 and bool(live)

    def line(self) -> str:
        phase = self._describe_phase()
        return self._rollouts_line() + (f"; {self.algorithm_name}: {phase}" if phase else "")

    def _describe_phase(self) -> str:
        if self._phase is None:
            return ""
        try:
            return str(self._phase() or "")
        except Exception:  # a progress line must never fail the run
            return ""

    def _rollouts_line(self) -> str:
        elapsed = format_duration(self._clock() - self._started)
        if not self._snapshot:
            return f"agentlightning: {elapsed}: {self.algorithm_name} has not started a rollout yet"
        modes = sorted({mode for mode, _ in self._snapshot}, key=lambda m: (_MODE_ORDER.get(m, 3), m))
        parts: list[str] = []
        for mode in modes:
            total = sum(n for (m, _), n in self._snapshot.items() if m == mode)
            done = sum(n for (m, s), n in self._snapshot.items() if m == mode and s in TERMINAL_ROLLOUT_STATUSES)
            failed = self._snapshot[(mode, "failed")]
            parts.append(f"{mode} {done}/{total} done" + (f" ({failed} failed)" if failed else ""))
        queued = sum(n for (_, s), n in self._snapshot.items() if s in QUEUING_ROLLOUT_STATUSES)
        running = self.unfinished - queued
        return f"agentlightning: {elapsed}: {', '.join(parts)}; {running} running, {queued} queued"

    def stall_message(self) -> str:
        queued = sum(n for (_, s), n in self._snapshot.items() if s in QUEUING_ROLLOUT_STATUSES)
        running = self.unfinished - queued
        return (
            f"waited {format_duration(self.stall_timeout)} for the {self.unfinished} unfinished rollouts of this run "
            f"({queued} queued, {running} running): none moved, and no runner holding one or free to take one "
            "sent a heartbeat. The runners died or never started (separate runner processes need "
            f"AGL_CURRENT_ROLE=runner and the same store). Set {STALL_ENV} to wait longer"
        )
