"""Baseline: a dry-run algorithm that feeds every sample to the runners and logs what comes back."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Literal, Optional

from agentlightning.types import Dataset, Rollout, RolloutMode, Span

from .fast import FastAlgorithm

__all__ = ["Baseline"]

logger = logging.getLogger(__name__)

SpanVerbosity = Literal["keys", "key_values", "none"]
_QUEUED_STATUSES = ["queuing", "requeuing"]


class Baseline(FastAlgorithm):
    """Enqueue each train/val sample, then log every rollout's attempts, spans and adapted data.

    Useful with `Trainer.dev()` to check an agent end to end before running a real algorithm.

    Args:
        n_epochs: passes over the concatenated train + val samples.
        train_split: kept for compatibility; must lie strictly between 0 and 1. Samples keep the mode
            of the dataset they come from.
        polling_interval: seconds between store polls (queue length, and status logs of unfinished rollouts).
        max_queue_length: enqueue only while at most this many rollouts are queuing or requeuing.
        span_verbosity: log span attribute "keys", full "key_values", or "none" of the spans.
    """

    def __init__(
        self,
        *,
        n_epochs: int = 1,
        train_split: float = 0.5,
        polling_interval: float = 5.0,
        max_queue_length: int = 4,
        span_verbosity: SpanVerbosity = "keys",
    ) -> None:
        if n_epochs < 1:
            raise ValueError(f"n_epochs must be >= 1, got {n_epochs}")
        if not 0.0 < train_split < 1.0:
            raise ValueError(f"train_split must lie strictly between 0 and 1, got {train_split}")
        if polling_interval <= 0:
            raise ValueError(f"polling_interval must be positive, got {polling_interval}")
        if max_queue_length < 0:
            raise ValueError(f"max_queue_length must be >= 0, got {max_queue_length}")
        if span_verbosity not in ("keys", "key_values", "none"):
            raise ValueError(f"span_verbosity must be 'keys', 'key_values' or 'none', got {span_verbosity!r}")
        self.n_epochs = n_epochs
        self.train_split = train_split
        self.polling_interval = polling_interval
        self.max_queue_length = max_queue_length
        self.span_verbosity: SpanVerbosity = span_verbosity
        self._finished = 0

    async def run(  # type: ignore[override]
        self,
        train_dataset: Optional[Dataset[Any]] = None,
        val_dataset: Optional[Dataset[Any]] = None,
    ) -> None:
        samples: list[tuple[Any, RolloutMode]] = []
        if train_dataset is not None:
            samples.extend((train_dataset[i], "train") for i in range(len(train_dataset)))
        if val_dataset is not None:
            samples.extend((val_dataset[i], "val") for i in range(len(val_dataset)))
        if not samples:
            logger.error("Baseline needs a train_dataset or a val_dataset with at least one sample; nothing to do.")
            return

        store = self.get_store()
        initial_resources = self.get_initial_resources()
        if initial_resources is not None:
            await store.update_resources("default", initial_resources)
            logger.info("Initial resources set: %s", initial_resources)

        self._finished = 0
        for epoch in range(self.n_epochs):
            logger.info("Proceeding epoch %d/%d.", epoch + 1, self.n_epochs)
            harvesters: list[asyncio.Task[None]] = []
            try:
                for sample, mode in samples:
                    await self._wait_for_queue_room()
                    rollout = await store.enqueue_rollout(input=sample, mode=mode)
                    logger.info("Enqueued rollout %s in %s mode with sample: %s", rollout.rollout_id, mode, sample)
                    harvesters.append(asyncio.create_task(self._harvest(rollout)))
                logger.info("Waiting for %d harvest tasks to complete...", len(harvesters))
                await asyncio.gather(*harvesters)
            finally:
                for task in harvesters:
                    task.cancel()

    async def _wait_for_queue_room(self) -> None:
        store = self.get_store()
        while True:
            queued = await store.query_rollouts(status_in=_QUEUED_STATUSES, limit=1)  # type: ignore[arg-type]
            count = getattr(queued, "total", None)
            if count is None:
                count = len(queued)
            if count <= self.max_queue_length:
                return
            await asyncio.sleep(self.polling_interval)

    async def _harvest(self, rollout: Rollout) -> None:
        """Follow one rollout's status until it is terminal, then log its attempts, spans and adapted data."""
        store = self.get_store()
        rollout_id = rollout.rollout_id
        status = rollout.status
        logger.info("[Rollout %s] Status is initialized to %s.", rollout_id, status)
        current: Optional[Rollout] = rollout
        while True:
            # Returns as soon as the rollout is terminal, so short runs are not padded to the polling interval.
            finished = await store.wait_for_rollouts(rollout_ids=[rollout_id], timeout=self.polling_interval)
            current = finished[0] if finished else await store.get_rollout_by_id(rollout_id)
            if current is None:
                logger.error("[Rollout %s] Disappeared from the store.", rollout_id)
                return
            if current.status != status:
                status = current.status
                if not current.is_terminal():
                    logger.info("[Rollout %s] Status changed to %s.", rollout_id, status)
            if current.is_terminal():
                break

        end_time = current.end_time or time.time()
        logger.info(
            "[Rollout %s] Finished with status %s in %.2f seconds.", rollout_id, status, end_time - current.start_time
        )
        attempts = await store.query_attempts(rollout_id)
        for attempt in attempts:
            logger.info(
                "[Rollout %s | Attempt %d] ID: %s. Status: %s. Worker: %s",
                rollout_id,
                attempt.sequence_id,
                attempt.attempt_id,
                attempt.status,
                attempt.worker_id,
            )
        spans = list(await store.query_spans(rollout_id, "latest"))
        self._log_spans(rollout_id, spans)
        self._log_adapted(rollout_id, spans)
        self._finished += 1
        logger.info("Finished %d rollouts.", self._finished)

    def _log_spans(self, rollout_id: str, spans: list[Span]) -> None:
        if self.span_verbosity == "none":
            return
        for span in spans:
            duration = (span.end_time - span.start_time) if span.end_time and span.start_time else 0.0
            prefix = f"[Rollout {rollout_id} | Attempt {span.attempt_id} | Span {span.span_id}] #{span.sequence_id}"
            if self.span_verbosity == "keys":
                detail = f"Attribute keys: {list(span.attributes.keys())}"
            else:
                detail = f"Attributes: {dict(span.attributes)}"
            logger.info("%s (%s) ... %.2f seconds. %s", prefix, span.name, duration, detail)

    def _log_adapted(self, rollout_id: str, spans: list[Span]) -> None:
        if not self.has_adapter():
            return
        try:
            adapted = self.get_adapter().adapt(spans)
        except Exception as exc:
            logger.warning("[Rollout %s] Adapter failed on %d spans: %r", rollout_id, len(spans), exc)
            return
        logger.info("[Rollout %s] Adapted data: %s", rollout_id, adapted)

    @property
    def finished_rollouts(self) -> int:
        """Rollouts harvested by the latest `run`."""
        return self._finished
