"""Forwarding: routing by model name, errors the agent can act on, retries, and SSE relayed as it arrives."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from agentlightning.llm_proxy.proxy import LLMProxy
from agentlightning.semconv import AGL_TIMEOUT_LOCATION
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import AttemptedRollout
from agentlightning.web.launcher import PythonServerLauncher, PythonServerLauncherArgs, pick_free_port
from tests.support.openai_server import ErrorReply, OpenAITestServer
from tests.support.raw_stream_server import RawStreamServer, chat_chunk

from .conftest import call_spans, model_entry

HI: list[Any] = [{"role": "user", "content": "hi"}]


def client_for(proxy: LLMProxy, **kwargs: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{proxy.endpoint}/v1", api_key="unused", max_retries=0, **kwargs)


async def test_requests_go_to_the_backend_serving_their_model_name(make_proxy: Any):
    with OpenAITestServer(model="alpha-7b") as alpha, OpenAITestServer(model="beta-7b") as beta:
        proxy = await make_proxy([model_entry("alpha", alpha), model_entry("beta", beta)])
        client = client_for(proxy)
        await client.chat.completions.create(model="alpha", messages=HI)
        await client.chat.completions.create(model="beta", messages=HI)
        await client.chat.completions.create(model="beta", messages=HI)
        assert [r["model"] for r in alpha.requests] == ["alpha-7b"]
        assert [r["model"] for r in beta.requests] == ["beta-7b", "beta-7b"]
        models = await client.models.list()
        assert [m.id for m in models.data] == ["alpha", "beta"]


async def test_deployments_sharing_a_name_take_turns(make_proxy: Any):
    with OpenAITestServer() as first, OpenAITestServer() as second:
        proxy = await make_proxy([model_entry("policy", first), model_entry("policy", second)])
        client = client_for(proxy)
        for _ in range(4):
            await client.chat.completions.create(model="policy", messages=HI)
        assert (len(first.requests), len(second.requests)) == (2, 2)


async def test_an_unknown_model_is_a_404_naming_the_served_models(proxy: LLMProxy):
    with pytest.raises(openai.NotFoundError) as info:
        await client_for(proxy).chat.completions.create(model="gpt-4o", messages=HI)
    assert "model 'gpt-4o' is not served by this proxy; known models: 'policy'" in str(info.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "the request body is not JSON"),
        (b"[1, 2]", "the request body must be a JSON object"),
        (json.dumps({"messages": HI}).encode(), "the request needs a 'model'"),
    ],
)
async def test_malformed_requests_are_400s_with_a_reason(proxy: LLMProxy, content: bytes, message: str):
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{proxy.endpoint}/v1/chat/completions", content=content)
    assert response.status_code == 400
    assert message in response.json()["error"]["message"]


async def test_backend_errors_reach_the_agent_unchanged_and_are_recorded_as_failed_calls(
    make_proxy: Any, store: InMemoryLightningStore, attempt: AttemptedRollout
):
    with OpenAITestServer(lambda _: ErrorReply(400, "prompt is longer than the context window")) as failing:
        proxy = await make_proxy([model_entry("policy", failing)])
        llm = proxy.as_resource(attempt.rollout_id, attempt.attempt.attempt_id)
        client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="prompt is longer than the context window"):
            await client.chat.completions.create(model="policy", messages=HI)
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(model="policy", messages=HI, stream=True)
    spans = list(await store.query_spans(attempt.rollout_id))
    assert len(spans) == 2
    for span in spans:
        assert span.status.status_code == "ERROR"
        assert span.attributes["error.message"] == "prompt is longer than the context window"
        assert span.attributes["http.response.status_code"] == 400
        assert span.attributes["gen_ai.prompt.0.content"] == "hi"


async def test_an_unreachable_backend_is_a_502_that_says_where(make_proxy: Any):
    dead = f"http://127.0.0.1:{pick_free_port()}/v1"
    proxy = await make_proxy([{"model_name": "policy", "litellm_params": {"model": "hosted_vllm/x", "api_base": dead}}])
    with pytest.raises(openai.APIStatusError) as info:
        await client_for(proxy).chat.completions.create(model="policy", messages=HI)
    assert info.value.status_code == 502
    assert f"backend {dead} for model 'policy' is unreachable after 1 attempt(s)" in str(info.value)


async def test_retries_move_on_to_the_next_deployment(
    make_proxy: Any, backend: OpenAITestServer, store: InMemoryLightningStore, attempt: AttemptedRollout
):
    dead = f"http://127.0.0.1:{pick_free_port()}/v1"
    proxy = await make_proxy(
        [
            {"model_name": "policy", "litellm_params": {"model": "hosted_vllm/x", "api_base": dead}},
            model_entry("policy", backend),
        ],
        num_retries=1,
    )
    llm = proxy.as_resource(attempt.rollout_id, attempt.attempt.attempt_id)
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=0)
    for _ in range(2):  # round-robin starts once on each deployment
        await client.chat.completions.create(model="policy", messages=HI)
    assert len(backend.requests) == 2
    spans = call_spans(await store.query_spans(attempt.rollout_id))
    attempts = sorted(int(str(span.attributes["agentlightning.llm_proxy.attempts"])) for span in spans)
    assert attempts == [1, 2]


async def test_retryable_backend_statuses_are_retried(make_proxy: Any, attempt: AttemptedRollout):
    answers = iter([ErrorReply(503, "warming up"), "ready now"])
    with OpenAITestServer(lambda _: next(answers)) as flaky:
        proxy = await make_proxy([model_entry("policy", flaky)], num_retries=2)
        reply = await client_for(proxy).chat.completions.create(model="policy", messages=HI)
    assert reply.choices[0].message.content == "ready now"


async def test_streamed_chunks_reach_the_agent_while_the_backend_is_still_generating(make_proxy: Any):
    """The backend pauses before its 4th event until the agent has read the first 3 through the proxy."""
    agent_has_early_chunks = threading.Event()

    def before_chunk(index: int) -> None:
        if index == 3:
            assert agent_has_early_chunks.wait(timeout=20), "the proxy held back the early chunks"

    with OpenAITestServer(lambda _: "one two three four five six", before_chunk=before_chunk) as slow:
        proxy = await make_proxy([model_entry("policy", slow)])
        body = {"model": "policy", "messages": HI, "stream": True}
        events: list[str] = []
        async with httpx.AsyncClient(timeout=30) as http:
            async with http.stream("POST", f"{proxy.endpoint}/v1/chat/completions", json=body) as response:
                assert response.headers["content-type"].startswith("text/event-stream")
                lines = response.aiter_lines()

                async def next_event() -> str:
                    async for line in lines:
                        if line.startswith("data: "):
                            return line[len("data: ") :]
                    raise AssertionError("stream ended early")

                for _ in range(3):
                    events.append(await asyncio.wait_for(next_event(), timeout=20))
                agent_has_early_chunks.set()
                async for line in lines:
                    if line.startswith("data: "):
                        events.append(line[len("data: ") :])
    assert events[-1] == "[DONE]"
    content = "".join(
        json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events[:-1] if json.loads(e)["choices"]
    )
    assert content == "one two three four five six"


async def test_the_proxied_stream_carries_the_same_chunks_as_the_backend(proxy: LLMProxy, backend: OpenAITestServer):
    async def deltas(base_url: str, model: str) -> list[Any]:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
        stream = await client.chat.completions.create(
            model=model, messages=HI, stream=True, stream_options={"include_usage": True}
        )
        return [(c.choices[0].delta.content if c.choices else None, c.usage) async for c in stream]

    direct = await deltas(backend.base_url, "test-model")
    proxied = await deltas(f"{proxy.endpoint}/v1", "policy")
    assert len(proxied) == len(direct) > 3
    assert proxied == direct


async def test_message_inspection_logs_each_call(
    make_proxy: Any, backend: OpenAITestServer, caplog: pytest.LogCaptureFixture
):
    proxy = await make_proxy([model_entry("policy", backend)], middlewares=["rollout_attempt", "message_inspection"])
    with caplog.at_level(logging.INFO, logger="agentlightning.llm_proxy.middleware"):
        await client_for(proxy).chat.completions.create(model="policy", messages=HI)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "LLM call to 'policy'" in logged and '"content": "hi"' in logged and "Echo: hi" in logged


# ---- legacy /v1/completions, against a minimal vLLM-like backend ----


def _completions_backend() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:  # pyright: ignore[reportUnusedFunction]
        body = await request.json()
        with_ids = bool(body.get("return_token_ids"))
        if not body.get("stream"):
            choice: dict[str, Any] = {"index": 0, "text": " Paris", "finish_reason": "stop", "logprobs": None}
            if with_ids:
                choice.update(prompt_token_ids=[11, 12], token_ids=[21, 5])
            return {"id": "cmpl-1", "object": "text_completion", "model": body["model"], "choices": [choice]}

        async def events() -> AsyncIterator[str]:
            for index, (text, ids) in enumerate([(" Par", [21]), ("is", [22, 5])]):
                choice = {"index": 0, "text": text, "finish_reason": "stop" if index else None}
                if with_ids:
                    choice["token_ids"] = ids
                    if index == 0:
                        choice["prompt_token_ids"] = [11, 12]
                yield f"data: {json.dumps({'id': 'cmpl-2', 'object': 'text_completion', 'model': body['model'], 'choices': [choice]})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


@pytest.fixture
def completions_backend() -> Iterator[str]:
    launcher = PythonServerLauncher(_completions_backend(), PythonServerLauncherArgs(port=0, launch_mode="thread"))
    asyncio.run(launcher.start())
    yield f"{launcher.access_endpoint}/v1"
    asyncio.run(launcher.stop())


async def test_legacy_completions_are_forwarded_and_recorded_with_token_ids(
    make_proxy: Any, completions_backend: str, store: InMemoryLightningStore, attempt: AttemptedRollout
):
    proxy = await make_proxy(
        [{"model_name": "base", "litellm_params": {"model": "hosted_vllm/base-model", "api_base": completions_backend}}]
    )
    llm = proxy.as_resource(attempt.rollout_id, attempt.attempt.attempt_id)
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=0)
    reply = await client.completions.create(model="base", prompt="The capital of France is")
    assert reply.choices[0].text == " Paris"
    stream = await client.completions.create(model="base", prompt="The capital of France is", stream=True)
    assert "".join([chunk.choices[0].text async for chunk in stream]) == " Paris"
    spans = call_spans(await store.query_spans(attempt.rollout_id), "openai.completion")
    assert len(spans) == 2
    for span in spans:
        assert span.attributes["gen_ai.request.type"] == "completion"
        assert span.attributes["gen_ai.prompt.0.content"] == "The capital of France is"
        assert span.attributes["prompt_token_ids"] == [11, 12]
    assert spans[0].attributes["response_token_ids"] == [21, 5]
    assert spans[1].attributes["response_token_ids"] == [21, 22, 5]
    assert spans[1].attributes["gen_ai.completion.0.content"] == " Paris"


async def test_an_agent_leaving_mid_stream_still_gets_its_call_recorded_as_failed(
    make_proxy: Any, store: InMemoryLightningStore, attempt: AttemptedRollout
):
    agent_left = threading.Event()

    def before_chunk(index: int) -> None:
        if index == 3:
            agent_left.wait(timeout=20)

    with OpenAITestServer(lambda _: "one two three four five six", before_chunk=before_chunk) as slow:
        proxy = await make_proxy([model_entry("policy", slow)])
        routed = proxy.as_resource(attempt.rollout_id, attempt.attempt.attempt_id).endpoint
        body = {"model": "policy", "messages": HI, "stream": True}
        async with httpx.AsyncClient(timeout=30) as http:
            async with http.stream("POST", f"{routed}/chat/completions", json=body) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        break  # read one event, then hang up
        agent_left.set()
        await proxy.stop()  # waits for the proxy to finish recording
    (span,) = await store.query_spans(attempt.rollout_id)
    assert span.status.status_code == "ERROR"
    assert "the client disconnected" in str(span.attributes["error.message"])
    assert span.attributes["prompt_token_ids"]


@pytest.mark.parametrize("suffix", ["/v1/chat/completions", "/chat/completions"])
async def test_every_route_layout_is_served_with_and_without_the_rollout_prefix(
    suffix: str, proxy: LLMProxy, store: InMemoryLightningStore, attempt: AttemptedRollout
):
    body = {"model": "policy", "messages": HI}
    routed = f"/rollout/{attempt.rollout_id}/attempt/{attempt.attempt.attempt_id}"
    async with httpx.AsyncClient(base_url=proxy.endpoint) as http:
        assert (await http.post(suffix, json=body)).status_code == 200
        assert (await http.post(routed + suffix, json=body)).status_code == 200
        models = await http.get(routed + suffix.replace("chat/completions", "models"))
        assert [m["id"] for m in models.json()["data"]] == ["policy"]
        assert (await http.get("/health")).json() == {"status": "ok"}
    assert len(call_spans(await store.query_spans(attempt.rollout_id))) == 1


async def test_a_malformed_backend_chunk_is_relayed_and_the_call_recorded_with_an_error(
    make_proxy: Any, store: InMemoryLightningStore, attempt: AttemptedRollout
):
    """A chunk with a text choice index used to break the agent's stream and leave the call unrecorded."""
    bad = b'data: {"choices": [{"index": "zero", "delta": {"content": "?"}}]}\n\n'
    with RawStreamServer([chat_chunk("Hel"), bad, chat_chunk("lo", finish_reason="stop"), b"data: [DONE]\n\n"]) as raw:
        proxy = await make_proxy([model_entry("policy", raw)])
        routed = proxy.as_resource(attempt.rollout_id, attempt.attempt.attempt_id).endpoint
        body = {"model": "policy", "messages": HI, "stream": True}
        async with httpx.AsyncClient(timeout=30) as http:
            async with http.stream("POST", f"{routed}/chat/completions", json=body) as response:
                received = b"".join([chunk async for chunk in response.aiter_bytes()])
        await proxy.stop()  # waits for the proxy to finish recording
    assert response.status_code == 200
    assert bad in received and received.endswith(b"data: [DONE]\n\n")  # relayed as the backend sent it
    (span,) = await store.query_spans(attempt.rollout_id)
    assert span.status.status_code == "ERROR"
    assert "1 malformed event" in str(span.attributes["error.message"])
    assert span.attributes["gen_ai.completion.0.content"] == "Hello"  # the well-formed chunks are kept


async def test_requests_over_the_size_limit_are_413_before_they_are_read(
    make_proxy: Any, backend: OpenAITestServer, attempt: AttemptedRollout
):
    """A 120 MB prompt used to be read whole (proxy RSS 265 -> 438 MB)."""
    proxy = await make_proxy([model_entry("policy", backend)], max_body_size=64 * 1024)
    url = f"{proxy.as_resource(attempt.rollout_id, attempt.attempt.attempt_id).endpoint}/chat/completions"
    body = json.dumps({"model": "policy", "messages": [{"role": "user", "content": "x" * 100_000}]}).encode()

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
        for start in range(0, len(body), 8192):
            yield body[start : start + 8192]

    async with httpx.AsyncClient(timeout=30) as http:
        declared = await http.post(url, content=body, headers={"content-type": "application/json"})
        streamed = await http.post(url, content=chunked(), headers={"content-type": "application/json"})
        fine = await http.post(url, json={"model": "policy", "messages": HI})
    for refused in (declared, streamed):
        assert refused.status_code == 413, refused.text
        assert "65536 bytes" in refused.json()["error"]["message"]
    assert fine.status_code == 200 and len(backend.requests) == 1  # the refused bodies never reached it
    with pytest.raises(ValueError, match="max_body_size"):
        LLMProxy(model_list=[model_entry("policy", backend)], max_body_size=0)


async def test_a_backend_past_its_timeout_is_a_504_recorded_as_an_llm_call_timeout(
    make_proxy: Any, store: InMemoryLightningStore, attempt: AttemptedRollout
):
    def slow(_: Any) -> str:
        time.sleep(1.0)
        return "too late"

    with OpenAITestServer(slow) as backend:
        entry = model_entry("policy", backend)
        entry["litellm_params"]["timeout"] = 0.2
        proxy = await make_proxy([entry])
        llm = proxy.as_resource(attempt.rollout_id, attempt.attempt.attempt_id)
        client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=0)
        with pytest.raises(openai.APIStatusError) as info:
            await client.chat.completions.create(model="policy", messages=HI)
    assert info.value.status_code == 504
    assert "did not answer within its timeout" in str(info.value)
    (span,) = [s for s in await store.query_spans(attempt.rollout_id) if s.name == "openai.chat.completion"]
    assert span.attributes[AGL_TIMEOUT_LOCATION] == "llm_call"
    assert span.attributes["http.response.status_code"] == 504 and span.status.status_code == "ERROR"
