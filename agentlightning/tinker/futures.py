"""Tinker futures: every training call is queued work with an id; `retrieve_future` returns its result.

Training work runs in arrival order on one worker thread (the learner is not thread-safe, and Tinker's
semantics are ordered: gradients of a `forward_backward` belong to the next `optim_step`). Sampling runs as
tasks on the server's event loop, batched by the policy engine. Results are kept (the newest
`max_results`), so a future can be retrieved again, e.g. by a client that retried.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Optional, Union

from .errors import TinkerError

__all__ = ["Outcome", "FutureTable"]

logger = logging.getLogger(__name__)


@dataclass
class Outcome:
    """A finished future: a JSON body, or protobuf bytes for ForwardBackwardOutput / SampleResponse."""

    json: Optional[dict[str, Any]] = None
    protobuf: Optional[bytes] = None
    error: Optional[str] = None
    category: str = "user"


@dataclass
class _Entry:
    kind: str
    future: asyncio.Future[Outcome] = field(repr=False)


class FutureTable:
    """Ids, queueing and results of the service's futures."""

    def __init__(self, max_results: int = 10_000) -> None:
        self._ids = itertools.count(1)
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._max_results = max_results
        self._worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="agl-tinker-train")

    def _new(self, kind: str) -> tuple[str, asyncio.Future[Outcome]]:
        request_id = f"{kind}-{next(self._ids)}"
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._entries[request_id] = _Entry(kind, future)
        while len(self._entries) > self._max_results:
            self._entries.popitem(last=False)
        return request_id, future

    def submit_training(self, kind: str, work: Callable[[], Outcome]) -> str:
        """Queue `work` on the training thread; returns the future's id at once."""
        request_id, future = self._new(kind)
        running = asyncio.wrap_future(self._worker.submit(_guarded, work))
        running.add_done_callback(lambda done: future.set_result(done.result()))
        return request_id

    def submit_async(self, kind: str, work: Callable[[], Awaitable[Outcome]]) -> str:
        """Run `work` as a task on the event loop (sampling); returns the future's id at once."""
        request_id, future = self._new(kind)

        async def run() -> None:
            try:
                outcome = await work()
            except TinkerError as exc:
                outcome = Outcome(error=exc.message, category=exc.category)
            except Exception as exc:  # a failed request must reach its future, not the loop's log only
                logger.exception("Tinker %s request %s failed", kind, request_id)
                outcome = Outcome(error=f"{type(exc).__name__}: {exc}", category="server")
            future.set_result(outcome)

        asyncio.get_running_loop().create_task(run())
        return request_id

    async def wait(self, request_id: str, timeout: float) -> Union[Outcome, None]:
        """The outcome of `request_id`, or None if it is still queued or running after `timeout` seconds."""
        entry = self._entries.get(request_id)
        if entry is None:
            raise KeyError(request_id)
        try:
            return await asyncio.wait_for(asyncio.shield(entry.future), timeout)
        except asyncio.TimeoutError:
            return None

    def kind(self, request_id: str) -> Optional[str]:
        entry = self._entries.get(request_id)
        return entry.kind if entry is not None else None

    @property
    def pending(self) -> int:
        return sum(1 for entry in self._entries.values() if not entry.future.done())

    def close(self) -> None:
        self._worker.shutdown(wait=True, cancel_futures=True)


def _guarded(work: Callable[[], Outcome]) -> Outcome:
    try:
        return work()
    except TinkerError as exc:
        return Outcome(error=exc.message, category=exc.category)
    except Exception as exc:  # reported through the future, never lost on the worker thread
        logger.exception("Tinker training request failed")
        return Outcome(error=f"{type(exc).__name__}: {exc}", category="server")
