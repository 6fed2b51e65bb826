"""`/v1/responses` and `/v1/messages` on the policy server, driven with the real `openai` and `anthropic` clients.

Both answer like `/v1/chat/completions` does: the same prompt ids for the same conversation, the generated
token ids, and one logprob per generated token when asked.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest

from agentlightning.serving.chat import render_chat_prompt
from agentlightning.serving.server import PolicyServer

pytestmark = pytest.mark.train

QUESTION = "hello"


def _root(server: PolicyServer) -> str:
    return server.endpoint.removesuffix("/v1")


def test_responses_carry_token_ids_and_logprobs_like_chat(server: PolicyServer) -> None:
    client = openai.OpenAI(base_url=server.endpoint, api_key="unused", max_retries=0)
    response = client.responses.create(
        model="tiny",
        instructions="Be brief.",
        input=QUESTION,
        max_output_tokens=5,
        temperature=0.7,
        include=["message.output_text.logprobs"],
    )
    data: dict[str, Any] = response.model_dump()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}]
    assert data["prompt_token_ids"] == render_chat_prompt(server.engine.tokenizer, messages)
    token_ids = data["token_ids"]
    assert 1 <= len(token_ids) <= 5 and data["usage"]["output_tokens"] == len(token_ids)
    (part,) = data["output"][0]["content"]
    assert part["type"] == "output_text" and part["text"] == response.output_text
    assert len(part["logprobs"]) == len(token_ids) and all(entry["logprob"] <= 0 for entry in part["logprobs"])
    chat = client.chat.completions.create(model="tiny", messages=messages, max_tokens=1)  # type: ignore[arg-type]
    assert chat.model_dump()["prompt_token_ids"] == data["prompt_token_ids"], "one prompt rendering for both APIs"


def test_responses_stream_ends_with_the_completed_response(server: PolicyServer) -> None:
    client = openai.OpenAI(base_url=server.endpoint, api_key="unused", max_retries=0)
    events = list(client.responses.create(model="tiny", input=QUESTION, max_output_tokens=4, stream=True))
    kinds = [event.type for event in events]
    completed = events[-1].response.model_dump()  # type: ignore[union-attr]
    # A length-cut answer ends with `response.incomplete`, as OpenAI's stream does.
    assert kinds[0] == "response.created"
    assert kinds[-1] == ("response.incomplete" if completed["status"] == "incomplete" else "response.completed")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")  # type: ignore[union-attr]
    assert text == completed["output"][0]["content"][0]["text"] and completed["token_ids"]


def test_messages_carry_token_ids_and_logprobs(server: PolicyServer) -> None:
    client = anthropic.Anthropic(base_url=_root(server), api_key="unused", max_retries=0)
    message = client.messages.create(
        model="tiny",
        system="Be brief.",
        messages=[{"role": "user", "content": QUESTION}],
        max_tokens=5,
        extra_body={"logprobs": True},
    )
    data: dict[str, Any] = message.model_dump()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}]
    assert data["prompt_token_ids"] == render_chat_prompt(server.engine.tokenizer, messages)
    assert data["stop_reason"] in ("end_turn", "max_tokens") and data["usage"]["output_tokens"] == len(
        data["token_ids"]
    )
    assert len(data["logprobs"]["content"]) == len(data["token_ids"])
    with client.messages.stream(model="tiny", messages=[{"role": "user", "content": QUESTION}], max_tokens=4) as stream:
        final = stream.get_final_message().model_dump()
    assert final["content"][0]["type"] == "text" and final["usage"]["output_tokens"] >= 1


def test_bad_requests_and_pauses_get_each_api_s_error_shape(server: PolicyServer) -> None:
    root = _root(server)
    not_json = httpx.post(f"{root}/v1/responses", content=b"{")
    assert not_json.status_code == 400 and "not JSON" in not_json.json()["error"]["message"]
    stored = httpx.post(f"{root}/v1/responses", json={"input": "x", "previous_response_id": "resp_1"})
    assert stored.status_code == 400 and "previous_response_id" in stored.json()["error"]["message"]
    no_max = httpx.post(f"{root}/v1/messages", json={"model": "tiny", "messages": [{"role": "user", "content": "x"}]})
    assert no_max.status_code == 400 and no_max.json()["type"] == "error"
    assert "max_tokens" in no_max.json()["error"]["message"]
    server.hold_timeout_s = 0.05  # a request held longer is answered 429
    server.pause()
    try:
        held = httpx.post(f"{root}/v1/messages", json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 2})
        assert held.status_code == 429 and held.headers["retry-after"] == "1"
        assert json.loads(held.text)["error"]["type"] == "rate_limit_error"
    finally:
        server.resume()
    assert server.in_flight == 0
