"""`EchoServer` and `agl serve --model echo`: the model-free server behind the quick start, docs and smoke runs."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import httpx
import pytest
from openai import OpenAI

from agentlightning.cli.serve import main
from agentlightning.serving.echo import EchoServer, byte_token_ids, render_chat_text


@pytest.fixture(scope="module")
def echo() -> EchoServer:
    with EchoServer() as server:
        yield server  # type: ignore[misc]


def test_replies_with_the_last_user_message_and_token_ids(echo: EchoServer) -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "first"},
        {"role": "user", "content": "What is 2+2?"},
    ]
    body = httpx.post(f"{echo.endpoint}/chat/completions", json={"model": "any", "messages": messages}).json()
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "What is 2+2?"}
    assert choice["finish_reason"] == "stop"
    assert choice["token_ids"] == byte_token_ids("What is 2+2?")
    assert body["prompt_token_ids"] == byte_token_ids(render_chat_text(messages))
    assert body["usage"]["completion_tokens"] == len("What is 2+2?")


def test_openai_client_plain_and_streamed(echo: EchoServer) -> None:
    client = OpenAI(base_url=echo.endpoint, api_key="EMPTY")
    reply = client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "héllo"}])
    assert reply.choices[0].message.content == "héllo"
    chunks = list(
        client.chat.completions.create(
            model="echo",
            messages=[{"role": "user", "content": "streamed"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "streamed"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == len("streamed")
    assert client.models.list().data[0].id == "echo"


def test_max_tokens_truncates_and_reports_length(echo: EchoServer) -> None:
    body = httpx.post(
        f"{echo.endpoint}/chat/completions",
        json={"messages": [{"role": "user", "content": "abcdefgh"}], "max_tokens": 3, "n": 2},
    ).json()
    assert [c["message"]["content"] for c in body["choices"]] == ["abc", "abc"]
    assert body["choices"][1]["finish_reason"] == "length"


def test_bad_requests_are_400_with_a_message(echo: EchoServer) -> None:
    response = httpx.post(f"{echo.endpoint}/chat/completions", json={"messages": []})
    assert response.status_code == 400
    assert "messages" in response.json()["error"]["message"]


def test_fixed_reply() -> None:
    with EchoServer(reply="4", model_name="four") as server:
        body = httpx.post(f"{server.endpoint}/chat/completions", json={"messages": [{"role": "user", "content": "?"}]})
        assert body.json()["choices"][0]["message"]["content"] == "4"
        assert server.as_resource().model == "four"


def test_reply_flag_needs_the_echo_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", "smollm2", "--reply", "x"]) == 2
    assert "--reply only applies to --model echo" in capsys.readouterr().err


def test_agl_serve_echo_runs_without_torch_until_interrupted() -> None:
    # The child refuses to import torch or transformers: the echo server must not need them.
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
        "from agentlightning.cli import main; sys.exit(main(['serve', '--model', 'echo', '--port', '0']))"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert process.stdout is not None
        endpoint = None
        deadline = time.monotonic() + 60
        for line in process.stdout:
            match = re.search(r"at (http://127\.0\.0\.1:\d+/v1)", line)
            if match:
                endpoint = match.group(1)
                break
            assert time.monotonic() < deadline
        assert endpoint is not None, "agl serve --model echo did not print its endpoint"
        body = httpx.post(f"{endpoint}/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert body.json()["choices"][0]["message"]["content"] == "hi"
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
    assert process.returncode == 0
