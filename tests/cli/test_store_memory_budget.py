"""`agl store --memory-budget`: the in-memory store evicts spans to stay under a budget the operator sets."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import pytest

from agentlightning.cli.store import build_parser, build_store, parse_memory_budget
from agentlightning.store import LightningStoreClient
from agentlightning.types import Span

from .test_cli import pick_free_port, running

MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("text", "expected"),
    [("64MB", 64 * MIB), ("64M", 64 * MIB), ("1GiB", 1024 * MIB), ("512k", 512 * 1024), ("1000", 1000), ("0.25", 0.25)],
)
def test_budget_sizes_and_fractions(text: str, expected: float) -> None:
    assert parse_memory_budget(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "0", "-1MB", "1.5", "0.0", "nan", "12XB"])
def test_bad_budgets_are_refused_with_the_flag_named(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="memory budget"):
        parse_memory_budget(text)


async def test_the_budget_becomes_the_eviction_threshold() -> None:
    store = build_store(build_parser().parse_args(["--memory-budget", "64MB"]))
    stats = await store.statistics()
    assert stats["eviction_threshold_bytes"] == 64 * MIB
    assert stats["safe_threshold_bytes"] == int(64 * MIB * 0.8)
    await store.close()


def test_a_budget_for_a_durable_backend_is_refused() -> None:
    args = build_parser().parse_args(["--backend", "sqlite", "--memory-budget", "64MB"])
    with pytest.raises(SystemExit, match="--memory-budget"):
        build_store(args)


async def test_a_served_store_stays_under_its_budget() -> None:
    port = pick_free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with running(["store", "--port", str(port), "--memory-budget", "1MB"], f"{endpoint}/v1/agl/health"):
        client = LightningStoreClient(endpoint)
        try:
            payload = "x" * 2048
            for batch in range(12):  # ~12 x 40 spans x ~6 KB: several times the budget
                started = await asyncio.gather(*(client.start_rollout(input=batch) for _ in range(4)))
                spans = [
                    Span.from_attributes(
                        rollout_id=r.rollout_id,
                        attempt_id=r.attempt.attempt_id,
                        sequence_id=k + 1,
                        name="step",
                        attributes={"payload": payload},
                    )
                    for r in started
                    for k in range(10)
                ]
                await client.add_many_spans(spans)
                stats: dict[str, Any] = dict(await client.statistics())
                assert 0 < stats["total_span_bytes"] <= MIB, batch
            assert stats["eviction_threshold_bytes"] == MIB
            assert stats["total_spans"] < 12 * 40
        finally:
            await client.close()
