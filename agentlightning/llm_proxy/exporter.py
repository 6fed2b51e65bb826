"""`LightningSpanExporter`: writes the proxy's finished call spans to the store.

Spans of concurrent calls are written together (one `add_many_spans`); `export` returns once its span is
stored, so the proxy can hold back the end of a response until the call is on record. A span the store
refuses (e.g. an unknown rollout) is logged and dropped without affecting the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional

from agentlightning.types import Span

if TYPE_CHECKING:
    from agentlightning.store.base import LightningStore

__all__ = ["LightningSpanExporter", "STORE_WRITE_TIMEOUT_SECONDS"]

logger = logging.getLogger(__name__)

STORE_WRITE_TIMEOUT_SECONDS = 10.0


def _describe(span: Span) -> str:
    return (
        f"span {span.name!r} of rollout {span.rollout_id!r} attempt {span.attempt_id!r} (sequence {span.sequence_id})"
    )


class LightningSpanExporter:
    """Batching writer of `Span`s to a `LightningStore`; lives on the event loop serving the proxy."""

    def __init__(
        self,
        store: LightningStore,
        *,
        max_batch_size: int = 256,
        write_timeout: float = STORE_WRITE_TIMEOUT_SECONDS,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.store = store
        self.max_batch_size = max_batch_size
        self.write_timeout = write_timeout
        self.n_exported = 0
        self.n_failed = 0
        self._pending: list[tuple[Span, asyncio.Future[bool]]] = []
        self._drain_task: Optional[asyncio.Task[None]] = None
        self._closed = False

    def export_nowait(self, span: Span) -> asyncio.Future[bool]:
        """Queue `span`; the future resolves to whether it was stored. Call from the serving loop."""
        if self._closed:
            raise RuntimeError(f"the span exporter is shut down; {_describe(span)} was not stored")
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((span, future))
        if self._drain_task is None or self._drain_task.done():
            self._drain_task = asyncio.ensure_future(self._drain())
        return future

    async def export(self, span: Span) -> bool:
        """Store `span`, waiting at most `write_timeout` seconds (it stays queued after a timeout)."""
        future = self.export_nowait(span)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout=self.write_timeout)
        except asyncio.TimeoutError:
            logger.warning(
                "%s not stored within %.1fs; it stays queued (is the store reachable?)",
                _describe(span),
                self.write_timeout,
            )
            return False

    async def export_many(self, spans: Sequence[Span]) -> list[bool]:
        """Store `spans` together (one batch with other queued spans), waiting at most `write_timeout` seconds."""
        futures = [self.export_nowait(span) for span in spans]
        try:
            return list(await asyncio.wait_for(asyncio.shield(asyncio.gather(*futures)), timeout=self.write_timeout))
        except asyncio.TimeoutError:
            logger.warning(
                "%s not stored within %.1fs; they stay queued (is the store reachable?)",
                " and ".join(_describe(span) for span in spans),
                self.write_timeout,
            )
            return [future.done() and future.result() for future in futures]

    async def flush(self) -> None:
        """Wait until every queued span has been written (or refused)."""
        while self._drain_task is not None and not self._drain_task.done():
            await asyncio.shield(self._drain_task)

    async def shutdown(self) -> None:
        """Flush, then refuse further spans."""
        await self.flush()
        self._closed = True

    async def _drain(self) -> None:
        while self._pending:
            batch = self._pending[: self.max_batch_size]
            del self._pending[: self.max_batch_size]
            results = await self._write([span for span, _ in batch])
            for (_, future), stored in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(stored)

    async def _write(self, spans: list[Span]) -> list[bool]:
        if len(spans) > 1:
            try:
                await self.store.add_many_spans(spans)
                self.n_exported += len(spans)
                return [True] * len(spans)
            except Exception as exc:
                logger.debug("batch of %d proxy spans refused (%r); writing them one by one", len(spans), exc)
        results: list[bool] = []
        for span in spans:
            try:
                await self.store.add_span(span)
                self.n_exported += 1
                results.append(True)
            except Exception as exc:
                self.n_failed += 1
                logger.warning("%s was not stored: %s: %s", _describe(span), type(exc).__name__, exc)
                results.append(False)
        return results
