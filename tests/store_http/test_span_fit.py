"""A span over the store server's request limit is cut to fit and stored, never dropped.

Before: an LLM call span over 16 MiB was refused (413) and lost, although the agent had its answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentlightning.semconv import AGL_ORIGINAL_SPAN_BYTES, AGL_TRUNCATED_ATTRIBUTES
from agentlightning.store import InMemoryLightningStore, LightningStoreClient, LightningStoreServer
from agentlightning.types import AttemptedRollout, Event, Span
from tests.store.factories import span_of

LIMIT = 32 * 1024


@pytest.fixture
async def served() -> AsyncIterator[tuple[LightningStoreClient, InMemoryLightningStore]]:
    inner = InMemoryLightningStore()
    server = LightningStoreServer(inner, port=0, max_body_size=LIMIT)
    await server.start()
    client = LightningStoreClient(server.endpoint, retry_budget=0, max_body_size=LIMIT)
    yield client, inner
    await client.close()
    await server.stop()


def _llm_span(rollout: AttemptedRollout, sequence_id: int) -> Span:
    prompt = "word " * 40_000  # 200 KB: six times the limit
    return span_of(
        rollout,
        sequence_id,
        name="openai.chat.completion",
        attributes={"gen_ai.prompt.0.content": prompt, "prompt_token_ids": list(range(30_000)), "model": "m"},
    ).model_copy(update={"events": [Event(name="e", attributes={"blob": "x" * 50_000})]})


def _assert_cut(span: Span) -> None:
    attributes = span.attributes
    assert "gen_ai.prompt.0.content" in attributes[AGL_TRUNCATED_ATTRIBUTES]  # type: ignore[operator]
    assert attributes[AGL_ORIGINAL_SPAN_BYTES] > 6 * LIMIT  # type: ignore[operator]
    prompt = str(attributes["gen_ai.prompt.0.content"])
    assert prompt.startswith("word word") and "truncated by agentlightning" in prompt
    assert attributes["model"] == "m"  # small attributes are kept whole
    assert len(span.model_dump_json()) <= LIMIT


@pytest.mark.parametrize("how", ["add_span", "add_many_spans", "finish_attempt"])
async def test_an_oversized_span_is_cut_to_fit_and_stored(
    served: tuple[LightningStoreClient, InMemoryLightningStore], how: str
) -> None:
    client, inner = served
    rollout = await client.start_rollout(input=1)
    big, small = _llm_span(rollout, 1), span_of(rollout, 2)
    if how == "add_span":
        await client.add_span(big)
        await client.add_span(small)
    elif how == "add_many_spans":
        await client.add_many_spans([big, small])
    else:
        finished = await client.finish_attempt(
            rollout.rollout_id, rollout.attempt.attempt_id, "succeeded", [big, small]
        )
        assert finished.attempt.status == "succeeded"
    stored = list(await inner.query_spans(rollout.rollout_id))
    assert [s.sequence_id for s in stored] == [1, 2]
    _assert_cut(stored[0])
    assert stored[1].attributes == small.attributes


async def test_spans_under_the_limit_are_sent_untouched(
    served: tuple[LightningStoreClient, InMemoryLightningStore],
) -> None:
    client, inner = served
    rollout = await client.start_rollout(input=1)
    span = span_of(rollout, 1, attributes={"p": "y" * (LIMIT // 2), "ids": [1, 2, 3]})
    await client.add_span(span)
    (stored,) = await inner.query_spans(rollout.rollout_id)
    assert stored.attributes == span.attributes and AGL_TRUNCATED_ATTRIBUTES not in stored.attributes
