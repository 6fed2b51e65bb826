"""Worker heartbeats: periodic `store.update_worker(worker_id, heartbeat_stats=system_snapshot())`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import threading
from typing import TYPE_CHECKING, Any, Literal, Optional

from agentlightning.utils.system_snapshot import system_snapshot

if TYPE_CHECKING:
    from agentlightning.store.base import LightningStore

__all__ = ["HeartbeatLaunchMode", "WorkerHeartbeat"]

logger = logging.getLogger(__name__)

HeartbeatLaunchMode = Literal["thread", "asyncio"]
HEARTBEAT_LAUNCH_MODES: tuple[str, ...] = ("thread", "asyncio")

# A heartbeat that takes longer than this is abandoned (and logged); the next one is tried on schedule.
MIN_HEARTBEAT_TIMEOUT_SECONDS = 5.0


class WorkerHeartbeat:
    """Reports a worker as alive, with system stats, every `interval` ± `jitter` seconds until stopped.

    `"thread"` mode takes snapshots on a daemon thread, so heartbeats keep their pace even while the
    event loop is busy; it calls a thread-safe store directly from that thread and hands the call to the
    runner's event loop otherwise. `"asyncio"` mode runs as a task on the runner's event loop.
    """

    def __init__(
        self,
        store: LightningStore,
        worker_id: str,
        *,
        interval: float,
        jitter: float = 0.0,
        launch_mode: HeartbeatLaunchMode = "thread",
        include_gpu: bool = False,
    ) -> None:
        if launch_mode not in HEARTBEAT_LAUNCH_MODES:
            raise ValueError(f"heartbeat launch mode must be one of {HEARTBEAT_LAUNCH_MODES}, got {launch_mode!r}")
        self._store = store
        self._worker_id = worker_id
        self._interval = interval
        self._jitter = max(0.0, jitter)
        self._launch_mode = launch_mode
        self._include_gpu = include_gpu
        self._timeout = max(MIN_HEARTBEAT_TIMEOUT_SECONDS, interval)
        self._task: Optional[asyncio.Task[None]] = None
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self.sent = 0  # successful heartbeats, for logs and tests

    @property
    def enabled(self) -> bool:
        return self._interval > 0

    def next_delay(self) -> float:
        """Seconds until the next heartbeat: the interval with uniform jitter, never negative."""
        return max(0.0, self._interval + random.uniform(-self._jitter, self._jitter))

    async def start(self) -> None:
        """Send the first heartbeat soon and keep sending until `stop()`. No-op when the interval is <= 0."""
        if not self.enabled or self._task is not None or self._thread is not None:
            return
        self._stop.clear()
        if self._launch_mode == "asyncio":
            self._task = asyncio.create_task(self._run_asyncio(), name=f"heartbeat-{self._worker_id}")
            return
        loop = asyncio.get_running_loop()
        self._thread = threading.Thread(
            target=self._run_thread, args=(loop,), name=f"heartbeat-{self._worker_id}", daemon=True
        )
        self._thread.start()

    async def stop(self) -> None:
        """Stop sending; waits for an in-flight heartbeat without blocking the event loop."""
        self._stop.set()
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            # Not `await task`: on Python < 3.12 `wait_for` may swallow the cancellation; the loop then
            # ends on its own at the `_stop` check.
            done, _ = await asyncio.wait({task}, timeout=self._timeout + 1.0)
            if not done:
                logger.warning("heartbeat task of %s did not stop within %.1fs", self._worker_id, self._timeout + 1.0)
        if self._thread is not None:
            thread, self._thread = self._thread, None
            await asyncio.to_thread(thread.join, self._timeout + 1.0)
            if thread.is_alive():
                logger.warning("heartbeat thread of %s did not stop within %.1fs", self._worker_id, self._timeout + 1.0)

    def _log_failure(self, exc: BaseException) -> None:
        if isinstance(exc, (TimeoutError, asyncio.TimeoutError, concurrent.futures.TimeoutError)):
            logger.warning("heartbeat of %s timed out after %.1fs", self._worker_id, self._timeout)
        else:
            logger.warning("heartbeat of %s failed: %r", self._worker_id, exc)

    async def _run_asyncio(self) -> None:
        while not self._stop.is_set():
            try:
                stats = await asyncio.to_thread(system_snapshot, self._include_gpu)
                await asyncio.wait_for(self._store.update_worker(self._worker_id, heartbeat_stats=stats), self._timeout)
                self.sent += 1
                logger.debug("heartbeat %d of %s sent", self.sent, self._worker_id)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._log_failure(exc)
            if self._stop.is_set():
                return
            await asyncio.sleep(self.next_delay())

    def _run_thread(self, runner_loop: asyncio.AbstractEventLoop) -> None:
        own_loop: Optional[asyncio.AbstractEventLoop] = None
        if self._store.capabilities.get("thread_safe", False):
            own_loop = asyncio.new_event_loop()
        try:
            while not self._stop.is_set():
                try:
                    stats = system_snapshot(self._include_gpu)
                    self._send(stats, runner_loop, own_loop)
                    self.sent += 1
                    logger.debug("heartbeat %d of %s sent", self.sent, self._worker_id)
                except Exception as exc:
                    self._log_failure(exc)
                self._stop.wait(self.next_delay())
        finally:
            if own_loop is not None:
                self._close_own_loop(own_loop)

    def _close_own_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Let the store release what it opened on this thread's loop (e.g. an HTTP session), then close it."""
        try:
            loop.run_until_complete(asyncio.wait_for(self._store.close_loop_resources(), self._timeout))
        except Exception as exc:
            logger.debug("heartbeat of %s could not release its store connection: %r", self._worker_id, exc)
        finally:
            loop.close()

    def _send(
        self,
        stats: dict[str, Any],
        runner_loop: asyncio.AbstractEventLoop,
        own_loop: Optional[asyncio.AbstractEventLoop],
    ) -> None:
        if own_loop is not None:
            coro = asyncio.wait_for(self._store.update_worker(self._worker_id, heartbeat_stats=stats), self._timeout)
            own_loop.run_until_complete(coro)
            return
        if runner_loop.is_closed():
            self._stop.set()
            return
        future = asyncio.run_coroutine_threadsafe(
            self._store.update_worker(self._worker_id, heartbeat_stats=stats), runner_loop
        )
        try:
            future.result(self._timeout)
        except BaseException:
            future.cancel()
            raise
