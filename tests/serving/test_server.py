"""The policy server over real HTTP on 127.0.0.1, driven with the `openai` client and httpx."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
import openai
import pytest

from agentlightning.serving.chat import render_chat_prompt
from agentlightning.serving.server import PolicyServer
from tests.support.tiny_model import ScriptedLM, tiny_model, tiny_tokenizer

pytestmark = pytest.mark.train

HELLO = [{"role": "user", "content": "hello"}]


def _client(server: PolicyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.endpoint, api_key="unused", max_retries=0)


def test_health_and_models(server: PolicyServer) -> None:
    base = server.endpoint.removesuffix("/v1")
    assert httpx.get(f"{base}/health").json() == {"status": "ok", "weights_version": 0}
    assert [m.id for m in _client(server).models.list().data] == ["tiny"]


def test_completion_returns_token_ids_logprobs_and_usage(server: PolicyServer) -> None:
    response = _client(server).chat.completions.create(
        model="tiny", messages=HELLO, max_tokens=5, temperature=0.8, seed=1, logprobs=True, top_logprobs=2
    )
    data: dict[str, Any] = response.model_dump()
    tokenizer = server.engine.tokenizer
    assert data["prompt_token_ids"] == render_chat_prompt(tokenizer, HELLO)
    choice = data["choices"][0]
    token_ids = choice["token_ids"]
    assert 1 <= len(token_ids) <= 5
    entries = choice["logprobs"]["content"]
    assert len(entries) == len(token_ids)
    assert all(e["logprob"] <= 0 and len(e["top_logprobs"]) == 2 for e in entries)
    usage = {k: data["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
    assert usage == {
        "prompt_tokens": len(data["prompt_token_ids"]),
        "completion_tokens": len(token_ids),
        "total_tokens": len(data["prompt_token_ids"]) + len(token_ids),
    }
    assert choice["message"]["content"] == tokenizer.decode(token_ids, skip_special_tokens=True)
    assert data["system_fingerprint"] == "weights-v0"


def test_n_choices_and_token_ids_can_be_turned_off(server: PolicyServer) -> None:
    response = _client(server).chat.completions.create(
        model="tiny", messages=HELLO, max_tokens=4, n=3, extra_body={"return_token_ids": False}
    )
    data = response.model_dump()
    assert [c["index"] for c in data["choices"]] == [0, 1, 2]
    assert "prompt_token_ids" not in data and all("token_ids" not in c for c in data["choices"])
    assert all(c["logprobs"] is None for c in data["choices"])


def test_streaming_matches_the_non_streamed_completion(server: PolicyServer) -> None:
    client = _client(server)
    kwargs: dict[str, Any] = {"model": "tiny", "messages": HELLO, "max_tokens": 8, "seed": 7, "temperature": 1.0}
    reference = client.chat.completions.create(**kwargs).model_dump()
    chunks = [
        c.model_dump()
        for c in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs)
    ]
    text = "".join((c["choices"][0]["delta"].get("content") or "") for c in chunks if c["choices"])
    token_ids = [t for c in chunks if c["choices"] for t in (c["choices"][0].get("token_ids") or [])]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[0]["prompt_token_ids"] == reference["prompt_token_ids"]
    assert text == reference["choices"][0]["message"]["content"]
    assert token_ids == reference["choices"][0]["token_ids"]
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert finish == [reference["choices"][0]["finish_reason"]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == len(token_ids)


def test_sse_framing_ends_with_done(server: PolicyServer) -> None:
    body = {"messages": HELLO, "max_tokens": 3, "stream": True, "n": 2}
    with httpx.stream("POST", f"{server.endpoint}/chat/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in events)
    assert events[-1] == "data: [DONE]"
    indices = {json.loads(e[6:])["choices"][0]["index"] for e in events[:-1]}
    assert indices == {0, 1}


def test_bad_requests_get_openai_style_400s(server: PolicyServer) -> None:
    url = f"{server.endpoint}/chat/completions"
    for body, needle in [
        ({"messages": []}, "messages"),
        ({"messages": HELLO, "n": 0}, "n"),
        ({"messages": HELLO, "temperature": -1}, "temperature"),
        ({"messages": [{"content": "x"}]}, "role"),
        ({"messages": [{"role": "user", "content": "x" * 3000}]}, "context"),
    ]:
        response = httpx.post(url, json=body)
        assert response.status_code == 400, body
        assert needle in response.json()["error"]["message"]
    assert httpx.post(url, content=b"{not json").status_code == 400
    # The server is still healthy afterwards.
    assert _client(server).chat.completions.create(model="tiny", messages=HELLO, max_tokens=2).choices


def test_concurrent_requests_are_batched_together() -> None:
    model, tokenizer = tiny_model()
    with PolicyServer(model, tokenizer, max_batch_size=4, batch_window_s=10.0) as server:
        client = openai.AsyncOpenAI(base_url=server.endpoint, api_key="unused", max_retries=0)

        async def burst() -> list[Any]:
            calls = [client.chat.completions.create(model="m", messages=HELLO, max_tokens=3) for _ in range(4)]
            return await asyncio.gather(*calls)

        responses = asyncio.run(burst())
        assert len(responses) == 4 and server.engine.batches_run == 1


def test_update_weights_is_served_without_restart(server: PolicyServer) -> None:
    client = _client(server)
    greedy: dict[str, Any] = {"model": "tiny", "messages": HELLO, "max_tokens": 6, "temperature": 0, "logprobs": True}
    before = client.chat.completions.create(**greedy).model_dump()
    other, _ = tiny_model(seed=3)
    server.update_weights(other)
    after = client.chat.completions.create(**greedy).model_dump()
    assert after["system_fingerprint"] == "weights-v1"
    before_lp = [e["logprob"] for e in before["choices"][0]["logprobs"]["content"]]
    after_lp = [e["logprob"] for e in after["choices"][0]["logprobs"]["content"]]
    assert before_lp != after_lp
    assert httpx.get(server.endpoint.removesuffix("/v1") + "/health").json()["weights_version"] == 1


def _scripted_server(text: str) -> PolicyServer:
    tokenizer = tiny_tokenizer()
    script = tokenizer.encode(text, add_special_tokens=False)
    model = ScriptedLM(script, len(tokenizer), tokenizer.eos_token_id)
    return PolicyServer(model, tokenizer, default_max_tokens=200)


TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
CALL_TEXT = 'Checking.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


def test_tool_calls_are_parsed_into_openai_tool_calls() -> None:
    with _scripted_server(CALL_TEXT) as server:
        response = _client(server).chat.completions.create(model="m", messages=HELLO, tools=[TOOL])
        choice = response.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content == "Checking."
        calls = choice.message.tool_calls or []
        assert len(calls) == 1 and calls[0].function.name == "get_weather"  # type: ignore[union-attr]
        assert json.loads(calls[0].function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
        # Without tools in the request the text is returned as is.
        plain = _client(server).chat.completions.create(model="m", messages=HELLO)
        assert plain.choices[0].message.content == CALL_TEXT and plain.choices[0].finish_reason == "stop"


def test_streamed_tool_calls_never_leak_the_tag_into_content() -> None:
    with _scripted_server(CALL_TEXT) as server:
        stream = _client(server).chat.completions.create(model="m", messages=HELLO, tools=[TOOL], stream=True)
        chunks = list(stream)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == "Checking."
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert len(calls) == 1 and calls[0].function.name == "get_weather"  # type: ignore[union-attr]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_stop_strings_end_the_completion() -> None:
    with _scripted_server("the quick brown fox") as server:
        response = _client(server).chat.completions.create(model="m", messages=HELLO, stop=["brown"])
    assert response.choices[0].message.content == "the quick "
    assert response.choices[0].finish_reason == "stop"


def test_as_resource_points_at_the_server(server: PolicyServer) -> None:
    resource = server.as_resource({"temperature": 0.5})
    assert resource.endpoint == server.endpoint and resource.model == "tiny"
    assert resource.sampling_parameters == {"temperature": 0.5}


def test_requests_arriving_while_paused_wait_for_the_resume_and_are_reported() -> None:
    model, tokenizer = tiny_model()
    with PolicyServer(model, tokenizer) as server:

        async def held() -> list[Any]:
            client = openai.AsyncOpenAI(base_url=server.endpoint, api_key="unused", max_retries=0)
            server.pause()
            calls = [
                asyncio.ensure_future(client.chat.completions.create(model="m", messages=HELLO, max_tokens=2))  # type: ignore[arg-type]
                for _ in range(3)
            ]
            for _ in range(1000):  # wait (bounded) until the three requests are held
                if server.gate.waiting == 3:
                    break
                await asyncio.sleep(0.01)
            assert server.gate.waiting == 3 and server.in_flight == 0
            assert not any(call.done() for call in calls)
            await asyncio.to_thread(server.resume)
            return list(await asyncio.gather(*calls))

        responses = asyncio.run(held())
        assert all(r.choices[0].message is not None for r in responses)
        release = server.gate.last_release
        assert release.held == 3 and 0 < release.longest_s and release.longest_s * 3 >= release.total_s
        assert server.gate.held == 3 and server.rejected_while_paused == 0 and server.in_flight == 0


def test_a_request_held_past_hold_timeout_gets_429_with_retry_after_and_the_openai_client_retries() -> None:
    model, tokenizer = tiny_model()
    with PolicyServer(model, tokenizer, retry_after_s=0.2, hold_timeout_s=0.1) as server:
        server.pause()
        raw = httpx.post(f"{server.endpoint}/chat/completions", json={"model": "m", "messages": HELLO, "max_tokens": 2})
        assert raw.status_code == 429 and raw.headers["retry-after"] == "0.2"
        assert "swapping weights for over 0.1 s" in raw.json()["error"]["message"]
        with pytest.raises(openai.RateLimitError):
            _client(server).chat.completions.create(model="m", messages=HELLO, max_tokens=2)  # type: ignore[arg-type]

        async def retried() -> Any:
            client = openai.AsyncOpenAI(base_url=server.endpoint, api_key="unused", max_retries=5)
            call = asyncio.ensure_future(client.chat.completions.create(model="m", messages=HELLO, max_tokens=2))  # type: ignore[arg-type]
            await asyncio.sleep(0.5)
            server.resume()
            return await call

        response = asyncio.run(retried())
        assert response.choices[0].message is not None
        assert server.rejected_while_paused >= 3 and server.in_flight == 0
    with pytest.raises(ValueError, match="hold_timeout_s"):
        PolicyServer(model, tokenizer, hold_timeout_s=-1)


def test_swap_weights_lets_running_requests_finish_then_serves_the_new_version() -> None:
    model, tokenizer = tiny_model()
    with PolicyServer(model, tokenizer) as server:
        client = openai.AsyncOpenAI(base_url=server.endpoint, api_key="unused", max_retries=5)
        other, _ = tiny_model(seed=3)

        async def run() -> tuple[Any, Any, Any]:
            body: dict[str, Any] = {"model": "m", "messages": HELLO, "max_tokens": 40, "temperature": 0}
            running = asyncio.ensure_future(client.chat.completions.create(**body))
            streamed = asyncio.ensure_future(client.chat.completions.create(**body, stream=True))
            for _ in range(200):  # wait (bounded) until both requests are being answered
                if server.in_flight == 2:
                    break
                await asyncio.sleep(0.01)
            assert server.in_flight == 2
            version = await asyncio.to_thread(server.swap_weights, other, drain_timeout=60)
            assert version == 1 and server.in_flight == 0 and not server.paused
            chunks = [chunk async for chunk in await streamed]
            after = await client.chat.completions.create(**body)
            return await running, chunks, after

        before, chunks, after = asyncio.run(run())
        # The running requests finished on the old weights; the next one reports the new version.
        assert before.system_fingerprint == "weights-v0" and after.system_fingerprint == "weights-v1"
        assert chunks and len(server.drain_times_s) == 1 and server.drain_times_s[0] >= 0
        report = server.swaps[0]  # pause to resume: the drain and the copy are part of it
        assert report.swap_ms >= report.drain_ms + report.weight_sync_ms and report.rejected_requests == 0
        assert set(report.as_metrics()) == {
            "swap_ms",
            "swap_held_requests",
            "swap_wait_ms",
            "swap_wait_ms_total",
            "swap_rejected_requests",
        }
        with pytest.raises(TimeoutError):
            assert server.gate.enter()  # a request that never ends
            try:
                server.drain(timeout=0.1)
            finally:
                server.gate.exit()


def test_a_client_that_goes_away_frees_its_generation_at_once() -> None:
    """A non-streamed request whose client disconnects is cancelled: its slot is free and decoding stops."""
    model, tokenizer = tiny_model()
    with PolicyServer(model, tokenizer, model_name="tiny", max_batch_size=2) as server:
        engine = server.engine
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 400, "ignore_eos": True}
        outcome: list[BaseException] = []

        def call() -> None:
            try:
                httpx.post(server.endpoint + "/chat/completions", json=body, timeout=1.0)
            except httpx.ReadTimeout as exc:
                outcome.append(exc)

        client = threading.Thread(target=call)
        client.start()
        for _ in range(300):  # bounded wait for the generation to start
            if engine.active_sequences:
                break
            time.sleep(0.01)
        with engine.exclusive():  # hold decoding until the client has given up and the server noticed
            client.join(30)
            time.sleep(1.0)
        assert outcome and isinstance(outcome[0], httpx.ReadTimeout)
        for _ in range(100):
            if engine.active_sequences == 0:
                break
            time.sleep(0.05)
        assert engine.active_sequences == 0
        steps = engine.steps_run
        time.sleep(0.3)
        assert engine.steps_run == steps, "decoding went on for a client that left"
        quick = httpx.post(server.endpoint + "/chat/completions", json={**body, "max_tokens": 2}, timeout=60)
        assert quick.status_code == 200
