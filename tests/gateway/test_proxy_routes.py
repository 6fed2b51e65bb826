"""The rollout-scoped OpenAI routes: request shaping per mode, exact token ids, spans, triplets, retries, pinning."""

from __future__ import annotations

import json
from typing import Any, Callable

import httpx
import openai
import pytest

from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.gateway import Gateway
from agentlightning.gateway.attempts import pin_replica
from agentlightning.instrumentation.openai import ChatCompletionAccumulator
from agentlightning.store.sqlite import SqliteLightningStore
from agentlightning.types import AttemptedRollout
from tests.support.openai_server import END_TOKEN, ErrorReply, OpenAITestServer, scripted, tokenize
from tests.support.raw_stream_server import RawStreamServer, chat_chunk

from .conftest import auth, post
from .upstream import REPLY, UpstreamServer


def client_for(gateway: Gateway, attempt: AttemptedRollout, mode: str) -> openai.AsyncOpenAI:
    rollout_id, attempt_id = attempt.rollout_id, attempt.attempt.attempt_id
    return openai.AsyncOpenAI(
        base_url=gateway.openai_base_url(rollout_id, attempt_id, mode),
        api_key=gateway.key(rollout_id, attempt_id),
        max_retries=0,
    )


MESSAGES: list[Any] = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}]


async def test_train_call_is_shaped_and_recorded_with_exact_token_ids(
    gateway: Gateway, backend: OpenAITestServer, store: SqliteLightningStore, attempt: AttemptedRollout
) -> None:
    client = client_for(gateway, attempt, "train")
    assert str(client.base_url).rstrip("/").endswith("/openai/v1")
    completion = await client.chat.completions.create(model="policy", messages=MESSAGES, temperature=0.1)
    sent = backend.requests[-1]
    assert sent["return_token_ids"] is True and sent["logprobs"] is True and sent["temperature"] == 1.0
    expected = backend.responses[-1]
    spans = list(await store.query_spans(attempt.rollout_id))
    assert [s.name for s in spans] == ["openai.chat.completion"]
    span = spans[0]
    assert span.attempt_id == attempt.attempt.attempt_id and span.sequence_id == 1
    assert span.attributes["prompt_token_ids"] == expected["prompt_token_ids"]
    assert span.attributes["response_token_ids"] == expected["choices"][0]["token_ids"]
    assert span.attributes["gen_ai.request.temperature"] == 1.0
    assert span.attributes["gen_ai.completion.0.content"] == completion.choices[0].message.content
    assert span.attributes["agentlightning.gateway.mode"] == "train"
    triplets = TracerTraceToTriplet().adapt(spans)
    assert len(triplets) == 1
    assert triplets[0].prompt["token_ids"] == expected["prompt_token_ids"]
    assert triplets[0].response["token_ids"] == expected["choices"][0]["token_ids"]
    assert triplets[0].response["logprobs"] is not None


async def test_val_call_uses_val_temperature_and_no_logprobs(
    gateway: Gateway, backend: OpenAITestServer, store: SqliteLightningStore
) -> None:
    attempt = await store.start_rollout(input={}, mode="val")
    await client_for(gateway, attempt, "val").chat.completions.create(model="policy", messages=MESSAGES)
    sent = backend.requests[-1]
    assert sent["temperature"] == 0.7 and sent["return_token_ids"] is True and "logprobs" not in sent


async def test_configured_temperatures_and_none_keeps_the_agents_choice(
    make_gateway: Callable[..., Any], backend: OpenAITestServer, attempt: AttemptedRollout
) -> None:
    gateway = await make_gateway(upstreams=[backend.base_url], train_temperature=None, train_logprobs=False)
    await client_for(gateway, attempt, "train").chat.completions.create(
        model="policy", messages=MESSAGES, temperature=0.25
    )
    assert backend.requests[-1]["temperature"] == 0.25 and "logprobs" not in backend.requests[-1]


async def test_streamed_call_relays_chunks_and_records_token_ids(
    gateway: Gateway, backend: OpenAITestServer, store: SqliteLightningStore, attempt: AttemptedRollout
) -> None:
    stream = await client_for(gateway, attempt, "train").chat.completions.create(
        model="policy", messages=MESSAGES, stream=True
    )
    accumulator = ChatCompletionAccumulator()
    n_chunks = 0
    async for chunk in stream:
        accumulator.add(chunk)
        n_chunks += 1
    assert n_chunks > 3
    expected = backend.responses[-1]
    assert accumulator.to_response()["choices"][0]["message"]["content"] == expected["choices"][0]["message"]["content"]
    (span,) = list(await store.query_spans(attempt.rollout_id))
    assert span.attributes["prompt_token_ids"] == expected["prompt_token_ids"]
    assert span.attributes["response_token_ids"] == expected["choices"][0]["token_ids"]
    assert span.attributes["agentlightning.llm_proxy.stream"] is True


async def test_completions_route_plain_and_streamed(
    make_gateway: Callable[..., Any], upstream: UpstreamServer, store: SqliteLightningStore, attempt: AttemptedRollout
) -> None:
    gateway = await make_gateway(upstreams=[upstream.base_url])
    client = client_for(gateway, attempt, "train")
    plain = await client.completions.create(model="policy", prompt="The answer is")
    assert plain.choices[0].text == REPLY
    assert upstream.requests[-1]["logprobs"] == 1 and upstream.requests[-1]["return_token_ids"] is True
    text = "".join(
        [c.choices[0].text async for c in await client.completions.create(model="p", prompt="Go", stream=True)]
    )
    assert text == REPLY
    spans = list(await store.query_spans(attempt.rollout_id))
    assert [s.name for s in spans] == ["openai.completion", "openai.completion"]
    assert spans[0].attributes["prompt_token_ids"] == tokenize("The answer is")
    assert spans[1].attributes["prompt_token_ids"] == tokenize("Go")
    for span in spans:
        assert span.attributes["response_token_ids"] == [*tokenize(REPLY), END_TOKEN]
    triplets = TracerTraceToTriplet(llm_call_match=r"openai\.(chat\.)?completion").adapt(spans)
    assert [t.response["token_ids"] for t in triplets] == [[*tokenize(REPLY), END_TOKEN]] * 2


async def test_responses_route_plain_and_streamed_become_chat_shaped_spans(
    make_gateway: Callable[..., Any], upstream: UpstreamServer, store: SqliteLightningStore, attempt: AttemptedRollout
) -> None:
    gateway = await make_gateway(upstreams=[upstream.base_url])
    client = client_for(gateway, attempt, "train")
    response = await client.responses.create(model="policy", instructions="Be brief.", input="What is six times seven?")
    assert response.output_text == REPLY
    sent = upstream.requests[-1]
    assert sent["return_token_ids"] is True and sent["temperature"] == 1.0
    assert "message.output_text.logprobs" in sent["include"]
    events = [event async for event in await client.responses.create(model="policy", input="Again", stream=True)]
    assert events[-1].type == "response.completed"
    spans = list(await store.query_spans(attempt.rollout_id))
    assert [s.name for s in spans] == ["openai.chat.completion"] * 2
    first, second = spans
    assert first.attributes["gen_ai.request.type"] == "responses"
    assert first.attributes["gen_ai.prompt.0.role"] == "system"
    assert first.attributes["gen_ai.prompt.1.content"] == "What is six times seven?"
    assert first.attributes["gen_ai.completion.0.content"] == REPLY
    assert first.attributes["prompt_token_ids"] == tokenize("Be brief. What is six times seven?")
    assert second.attributes["prompt_token_ids"] == tokenize("Again")
    triplets = TracerTraceToTriplet().adapt(spans)
    assert [t.response["token_ids"] for t in triplets] == [[*tokenize(REPLY), END_TOKEN]] * 2


async def test_retries_408_409_429_and_5xx_with_backoff(
    make_gateway: Callable[..., Any], store: SqliteLightningStore, attempt: AttemptedRollout
) -> None:
    replies: list[Any] = [ErrorReply(409, "busy"), ErrorReply(503, "down"), ErrorReply(429, "slow"), "finally"]
    with OpenAITestServer(scripted(replies)) as server:
        gateway = await make_gateway(upstreams=[server.base_url], num_retries=3)
        completion = await client_for(gateway, attempt, "train").chat.completions.create(
            model="policy", messages=MESSAGES
        )
        assert completion.choices[0].message.content == "finally"
        assert len(server.requests) == 4
    (span,) = list(await store.query_spans(attempt.rollout_id))
    assert span.attributes["agentlightning.llm_proxy.attempts"] == 4 and span.status.status_code == "OK"


async def test_exhausted_retries_answer_the_upstream_error_and_record_it(
    make_gateway: Callable[..., Any], store: SqliteLightningStore, attempt: AttemptedRollout
) -> None:
    with OpenAITestServer(scripted([ErrorReply(500, "broken")])) as server:
        gateway = await make_gateway(upstreams=[server.base_url], num_retries=1)
        with pytest.raises(openai.InternalServerError, match="broken"):
            await client_for(gateway, attempt, "train").chat.completions.create(model="policy", messages=MESSAGES)
        assert len(server.requests) == 2
    (span,) = list(await store.query_spans(attempt.rollout_id))
    assert span.status.status_code == "ERROR" and span.attributes["error.message"] == "broken"


async def test_rollouts_are_pinned_to_one_replica(
    make_gateway: Callable[..., Any], store: SqliteLightningStore
) -> None:
    with OpenAITestServer() as first, OpenAITestServer() as second:
        replicas = [first, second]
        gateway = await make_gateway(upstreams=[first.base_url, second.base_url])
        attempts = [await store.start_rollout(input={"i": i}, mode="train") for i in range(6)]
        for attempt in attempts:
            client = client_for(gateway, attempt, "train")
            for turn in range(2):
                await client.chat.completions.create(
                    model="policy", messages=[{"role": "user", "content": f"{attempt.rollout_id} {turn}"}]
                )
        for attempt in attempts:
            pinned = replicas[pin_replica(attempt.rollout_id, 2)]
            other = replicas[1 - pin_replica(attempt.rollout_id, 2)]
            seen = [r for r in pinned.requests if r["messages"][0]["content"].startswith(attempt.rollout_id)]
            assert len(seen) == 2
            assert not [r for r in other.requests if r["messages"][0]["content"].startswith(attempt.rollout_id)]


async def test_upstream_from_the_rollouts_llm_resource(
    make_gateway: Callable[..., Any], backend: OpenAITestServer, store: SqliteLightningStore
) -> None:
    from agentlightning.types import LLM

    gateway = await make_gateway()
    resources = await store.add_resources({"llm": LLM(endpoint=backend.base_url, model="resource-model")})
    attempt = await store.start_rollout(input={}, mode="val", resources_id=resources.resources_id)
    client = client_for(gateway, attempt, "val")
    models = await client.models.list()
    assert [m.id for m in models.data] == ["resource-model"]
    reply = await client.chat.completions.with_raw_response.create(model="resource-model", messages=MESSAGES)
    assert reply.http_response.status_code == 200
    assert backend.requests[-1]["model"] == "resource-model"

    bare = await store.start_rollout(input={}, mode="val", resources_id=None)
    await store.add_resources({"prompt": {"resource_type": "prompt_template", "template": "x", "engine": "f-string"}})  # type: ignore[dict-item]
    no_llm = await store.start_rollout(input={}, mode="val")
    assert bare.resources_id is not None
    response = await post(
        gateway.openai_base_url(no_llm.rollout_id, no_llm.attempt.attempt_id, "val") + "/chat/completions",
        headers=auth(gateway, no_llm),
        json={"model": "m", "messages": MESSAGES},
    )
    assert response.status_code == 502 and "without an LLM resource" in response.json()["error"]["message"]


async def test_models_route_lists_the_upstreams_models(gateway: Gateway, attempt: AttemptedRollout) -> None:
    models = await client_for(gateway, attempt, "train").models.list()
    assert [m.id for m in models.data] == ["test-model"]


async def test_resources_updated_in_place_move_the_upstream(
    make_gateway: Callable[..., Any], store: SqliteLightningStore
) -> None:
    from agentlightning.types import LLM

    gateway = await make_gateway(attempt_cache_seconds=0)
    with OpenAITestServer() as first, OpenAITestServer() as second:
        await store.update_resources("default", {"llm": LLM(endpoint=first.base_url, model="m")})
        attempt = await store.start_rollout(input={}, mode="train", resources_id="default")
        client = client_for(gateway, attempt, "train")
        await client.chat.completions.create(model="m", messages=MESSAGES)
        await store.update_resources("default", {"llm": LLM(endpoint=second.base_url, model="m")})
        await client.chat.completions.create(model="m", messages=MESSAGES)
        assert (len(first.requests), len(second.requests)) == (1, 1)


@pytest.mark.parametrize("route", ["chat/completions", "responses"])
async def test_a_malformed_upstream_chunk_is_relayed_and_the_call_recorded_with_an_error(
    make_gateway: Callable[..., Any], store: SqliteLightningStore, attempt: AttemptedRollout, route: str
) -> None:
    """A malformed chunk used to break the agent's stream and leave the call unrecorded."""
    deep = b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\n"  # past the JSON parser's nesting limit
    final = {"type": "response.completed", "response": {"id": "r1", "status": "completed", "output": []}}
    events = (
        [chat_chunk("Hel"), deep, chat_chunk("lo", finish_reason="stop"), b"data: [DONE]\n\n"]
        if route == "chat/completions"
        else [deep, b"data: " + json.dumps(final).encode() + b"\n\n"]
    )
    with RawStreamServer(events) as raw:
        gateway = await make_gateway(upstreams=[raw.base_url])
        url = gateway.openai_base_url(attempt.rollout_id, attempt.attempt.attempt_id, "train") + "/" + route
        body: dict[str, Any] = {"model": "policy", "stream": True, "messages": MESSAGES, "input": "hi"}
        async with httpx.AsyncClient(timeout=30) as http:
            async with http.stream("POST", url, json=body, headers=auth(gateway, attempt)) as response:
                received = b"".join([chunk async for chunk in response.aiter_bytes()])
        await gateway.stop()  # waits for the call to be recorded
    assert response.status_code == 200 and deep in received and received.endswith(events[-1])
    (span,) = list(await store.query_spans(attempt.rollout_id))
    assert span.status.status_code == "ERROR"
    assert "1 malformed event" in str(span.attributes["error.message"])
