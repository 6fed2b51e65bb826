"""`agl serve` never answers 500 to a body it was sent: a wrong shape is a 400 naming the field.

Before: 170 of 3,000 random `/v1/responses` bodies got a 500 (e.g. `include: true`, a numeric `content`),
3 of 3 on a live model server; the echo server (the quick start's) answered `/v1/responses` and
`/v1/messages` with 404. Random bodies come from hypothesis (a bounded number of examples) and go over
loopback to a real echo server and a real policy server with a tiny model.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlightning.serving.echo import EchoServer
from agentlightning.serving.server import PolicyServer

VALID = {"model": "echo", "input": [{"role": "user", "content": "hi"}], "max_output_tokens": 4}

# (body, a field the 400 must name)
BAD_BODIES: list[tuple[dict[str, Any], str]] = [
    ({**VALID, "include": True}, "include"),
    ({**VALID, "input": [{"role": "user", "content": 5}]}, "content"),
    ({**VALID, "input": [5]}, "input"),
    ({**VALID, "input": [{"role": "user", "content": [{"type": "input_text", "text": 7}]}]}, "text"),
    ({**VALID, "instructions": ["be brief"]}, "instructions"),
    ({**VALID, "tools": "search"}, "tools"),
    ({**VALID, "text": 3}, "text"),
    ({**VALID, "max_output_tokens": 0}, "max_output_tokens"),
    ({**VALID, "input": [{"type": "function_call", "call_id": 1, "name": "f", "arguments": "{}"}]}, "call_id"),
]

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)
FIELDS = st.sampled_from(
    [
        "input",
        "include",
        "instructions",
        "tools",
        "tool_choice",
        "text",
        "temperature",
        "top_p",
        "stream",
        "max_output_tokens",
        "model",
        "parallel_tool_calls",
        "metadata",
        "previous_response_id",
    ]
)
ITEM_FIELDS = st.sampled_from(["role", "content", "type", "call_id", "name", "arguments", "output", "id"])


@st.composite
def responses_bodies(draw: st.DrawFn) -> dict[str, Any]:
    """A valid body with some fields (top-level or of its input item) replaced by random JSON."""
    body: dict[str, Any] = {**VALID, "input": [dict(VALID["input"][0])]}  # type: ignore[index]
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            body[draw(FIELDS)] = draw(JSON)
        elif isinstance(body.get("input"), list) and body["input"] and isinstance(body["input"][0], dict):
            body["input"][0][draw(ITEM_FIELDS)] = draw(JSON)
    body["stream"] = body.get("stream") if isinstance(body.get("stream"), bool) else False
    return body


@pytest.fixture(scope="module")
def echo() -> Iterator[EchoServer]:
    with EchoServer() as server:
        yield server


@pytest.mark.parametrize(("body", "field"), BAD_BODIES)
def test_a_body_of_the_wrong_shape_is_a_400_naming_the_field(
    echo: EchoServer, body: dict[str, Any], field: str
) -> None:
    answer = httpx.post(f"{echo.endpoint}/responses", json=body)
    assert answer.status_code == 400, answer.text
    assert field in answer.json()["error"]["message"]


def test_random_responses_bodies_never_get_a_5xx_from_the_echo_server(echo: EchoServer) -> None:
    statuses: list[int] = []
    with httpx.Client(base_url=echo.endpoint, timeout=30) as client:

        @settings(
            max_examples=150,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        )
        @given(body=responses_bodies() | st.dictionaries(st.text(max_size=8), JSON, max_size=4))
        def check(body: dict[str, Any]) -> None:
            answer = client.post("/responses", json=body)
            statuses.append(answer.status_code)
            assert answer.status_code < 500, (body, answer.text)

        check()
    assert 200 in statuses and 400 in statuses, "the fuzz reached both answers"


def test_random_bodies_never_get_a_5xx_from_a_policy_server(model_and_tokenizer: tuple[Any, Any]) -> None:
    model, tokenizer = model_and_tokenizer
    with PolicyServer(model, tokenizer, model_name="echo", seed=0, default_max_tokens=2) as server:
        with httpx.Client(base_url=server.endpoint, timeout=60) as client:
            for body, field in BAD_BODIES:
                answer = client.post("/responses", json=body)
                assert answer.status_code == 400 and field in answer.json()["error"]["message"]

            @settings(
                max_examples=10,
                deadline=None,
                database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
            )
            @given(body=responses_bodies())
            def check(body: dict[str, Any]) -> None:
                body["max_output_tokens"] = 2
                answer = client.post("/responses", json=body)
                assert answer.status_code < 500, (body, answer.text)

            check()


def test_the_echo_server_serves_responses_and_messages_to_the_real_clients(echo: EchoServer) -> None:
    response = openai.OpenAI(base_url=echo.endpoint, api_key="unused", max_retries=0).responses.create(
        model="echo", input="hello there"
    )
    assert response.output_text == "hello there"
    assert response.model_dump()["token_ids"] == list(b"hello there")
    message = anthropic.Anthropic(
        base_url=echo.endpoint.removesuffix("/v1"), api_key="unused", max_retries=0
    ).messages.create(model="echo", max_tokens=64, messages=[{"role": "user", "content": "bonjour"}])
    assert message.content[0].text == "bonjour"  # type: ignore[union-attr]
