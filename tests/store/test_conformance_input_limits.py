"""Conformance: odd numbers and NUL bytes get a clear error (or a documented meaning) on every backend.

- `wait_for_rollouts(timeout=nan)` is refused; `timeout=inf` means "no deadline", like None.
- `timeout_seconds` / `unresponsive_seconds` of a rollout config must be positive and finite.
- A NUL byte (`\\x00`) in a span's ids or name, a worker id or a resources id is refused with a ValueError
  naming the field: PostgreSQL text cannot hold one, so every backend rejects it the same way.
"""

from __future__ import annotations

import asyncio
import math

import pytest

from agentlightning.store import LightningStore
from agentlightning.types import RolloutConfig

from .backends import Backend
from .factories import make_span, span_of


async def bounded(awaitable: object, seconds: float = 10.0) -> object:
    """Fail the test instead of hanging it when a call blocks."""
    return await asyncio.wait_for(awaitable, seconds)  # type: ignore[arg-type]


# ---- wait_for_rollouts timeouts ----


async def test_wait_with_a_nan_timeout_is_refused(store: LightningStore, backend: Backend) -> None:
    rollout = await store.enqueue_rollout(input=1)
    with pytest.raises(backend.errors, match="timeout"):
        await bounded(store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=math.nan))


@pytest.mark.parametrize("timeout", [-1.0, -math.inf])
async def test_wait_with_a_negative_timeout_is_refused(store: LightningStore, backend: Backend, timeout: float) -> None:
    with pytest.raises(backend.errors, match="timeout"):
        await bounded(store.wait_for_rollouts(rollout_ids=["ro-x"], timeout=timeout))


async def test_wait_with_an_infinite_timeout_waits_like_none(store: LightningStore) -> None:
    done = await store.enqueue_rollout(input=1)
    await store.update_rollout(done.rollout_id, status="succeeded")
    finished = await bounded(store.wait_for_rollouts(rollout_ids=[done.rollout_id], timeout=math.inf))
    assert [r.rollout_id for r in finished] == [done.rollout_id]  # type: ignore[attr-defined]
    pending = await store.enqueue_rollout(input=2)
    waiting = asyncio.ensure_future(store.wait_for_rollouts(rollout_ids=[pending.rollout_id], timeout=math.inf))
    await asyncio.sleep(0.3)
    assert not waiting.done()  # no deadline: it waits for the rollout
    await store.update_rollout(pending.rollout_id, status="cancelled")
    finished = await bounded(waiting)
    assert [r.status for r in finished] == ["cancelled"]  # type: ignore[attr-defined]


# ---- rollout config durations ----


@pytest.mark.parametrize("field", ["timeout_seconds", "unresponsive_seconds"])
@pytest.mark.parametrize("value", [-5, 0, math.nan, math.inf])
async def test_config_durations_must_be_positive_and_finite(
    store: LightningStore, backend: Backend, field: str, value: float
) -> None:
    with pytest.raises(backend.errors, match=field):
        await store.enqueue_rollout(input=1, config={field: value})  # type: ignore[arg-type]
    assert (await store.query_rollouts()).total == 0
    started = await store.start_rollout(input=2)
    with pytest.raises(backend.errors, match=field):
        await store.update_rollout(started.rollout_id, config={field: value})
    rollout = await store.get_rollout_by_id(started.rollout_id)
    assert rollout is not None and getattr(rollout.config, field) == getattr(RolloutConfig(), field)


# ---- NUL bytes ----


@pytest.mark.parametrize("field", ["name", "span_id", "trace_id", "parent_id"])
async def test_nul_in_a_span_field_is_refused_and_nothing_is_stored(
    store: LightningStore, backend: Backend, field: str
) -> None:
    started = await store.start_rollout(input=1)
    bad = span_of(started, 1, **{field: "bad\x00value"})
    with pytest.raises(backend.errors, match=f"{field}.*NUL"):
        await store.add_span(bad)
    with pytest.raises(backend.errors, match=f"{field}.*NUL"):
        await store.add_many_spans([span_of(started, 2), bad])
    assert (await store.query_spans(started.rollout_id)).total == 0


async def test_nul_in_a_span_reference_is_refused(store: LightningStore, backend: Backend) -> None:
    started = await store.start_rollout(input=1)
    with pytest.raises(backend.errors, match="rollout_id.*NUL"):
        await store.add_span(make_span("ro-\x00", started.attempt.attempt_id, 1))
    with pytest.raises(backend.errors, match="attempt_id.*NUL"):
        await store.add_span(make_span(started.rollout_id, "at-\x00", 1))


async def test_nul_in_a_worker_id_is_refused_everywhere_it_is_written(store: LightningStore, backend: Backend) -> None:
    worker = "w\x001"
    await store.enqueue_rollout(input=1)
    with pytest.raises(backend.errors, match="worker_id.*NUL"):
        await store.update_worker(worker, heartbeat_stats={"cpu": 1})
    with pytest.raises(backend.errors, match="worker_id.*NUL"):
        await store.dequeue_rollout(worker_id=worker)
    with pytest.raises(backend.errors, match="worker_id.*NUL"):
        await store.dequeue_many_rollouts(limit=1, worker_id=worker)
    with pytest.raises(backend.errors, match="worker_id.*NUL"):
        await store.start_rollout(input=2, worker_id=worker)
    assert (await store.query_rollouts()).total == 1  # the failed start created nothing
    claimed = await store.dequeue_rollout()  # the refused dequeues claimed nothing
    assert claimed is not None
    with pytest.raises(backend.errors, match="worker_id.*NUL"):
        await store.start_attempt(claimed.rollout_id, worker_id=worker)
    with pytest.raises(backend.errors, match="worker_id.*NUL"):
        await store.update_attempt(claimed.rollout_id, "latest", worker_id=worker)
    assert (await store.query_workers()).total == 0


async def test_nul_in_a_resources_id_is_refused(store: LightningStore, backend: Backend) -> None:
    with pytest.raises(backend.errors, match="resources_id.*NUL"):
        await store.update_resources("rs\x00", {})
    with pytest.raises(backend.errors, match="resources_id.*NUL"):
        await store.enqueue_rollout(input=1, resources_id="rs\x00")
    assert (await store.query_resources()).total == 0


async def test_lookups_with_a_nul_byte_find_nothing_or_are_refused(store: LightningStore, backend: Backend) -> None:
    """No stored id can hold a NUL; a lookup with one never fails as a server error (PostgreSQL refuses it)."""
    for lookup in (
        lambda: store.get_rollout_by_id("ro-\x00"),
        lambda: store.get_worker_by_id("w-\x00"),
        lambda: store.query_spans("ro-\x00", name="a\x00"),
        lambda: store.wait_for_rollouts(rollout_ids=["ro-\x00"], timeout=0),
    ):
        try:
            found = await lookup()
        except backend.errors as exc:
            assert "NUL" in str(exc)
        else:
            assert not found
