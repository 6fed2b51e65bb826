"""The OpenAI Responses API through the gateway: forwarded as is, recorded as a chat-shaped LLM span.

The span translates the request (`instructions` + `input` items) into chat messages and the response
(`output` items) into one assistant choice, so the adapters that read chat spans (triplets, messages)
read Responses calls too. Token ids are taken where vLLM-style backends put them: `prompt_token_ids`
(top level) and `output_token_ids` / per-output-item `token_ids`, or `token_ids` on the Response (what the
policy server and `formats.responses` write).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator, Mapping
from typing import Any, Optional

import aiohttp
from starlette.responses import Response, StreamingResponse

from agentlightning.llm_proxy.call import ProxyCall
from agentlightning.llm_proxy.forward import RETRY_BACKOFF_SECONDS, backend_error_message, error_response
from agentlightning.llm_proxy.models import Deployment
from agentlightning.llm_proxy.runtime import ProxyRuntime

__all__ = ["forward_responses_call", "responses_request_as_chat", "responses_response_as_chat"]

logger = logging.getLogger(__name__)

_TRANSPORT_ERRORS = (aiohttp.ClientConnectionError, asyncio.TimeoutError, OSError)
_FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and "text" in part  # type: ignore[misc]
        )
    return ""


def _int_list(value: Any) -> Optional[list[int]]:
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):  # type: ignore[union-attr]
        return list(value)  # type: ignore[arg-type]
    return None


def responses_request_as_chat(body: Mapping[str, Any]) -> dict[str, Any]:
    """A Responses request as the equivalent chat-completions request (for the span)."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": str(body["instructions"])})
    items = body.get("input")
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
    for raw in items if isinstance(items, list) else []:  # type: ignore[union-attr]
        if not isinstance(raw, dict):
            continue
        item: dict[str, Any] = raw  # type: ignore[assignment]
        kind = item.get("type", "message")
        if kind == "message":
            messages.append({"role": str(item.get("role", "user")), "content": _text_of(item.get("content"))})
        elif kind == "function_call":
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments")},
            }
            if messages and messages[-1]["role"] == "assistant" and "tool_calls" in messages[-1]:
                messages[-1]["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(
                {"role": "tool", "tool_call_id": item.get("call_id"), "content": _text_of(item.get("output"))}
            )
    request = {k: v for k, v in body.items() if k not in ("input", "instructions", "tools")}
    if "max_output_tokens" in request:
        request["max_tokens"] = request.pop("max_output_tokens")
    request["messages"] = messages
    tools = [tool for tool in body.get("tools") or [] if isinstance(tool, dict) and tool.get("type") == "function"]
    if tools:
        request["tools"] = tools
    return request


def responses_response_as_chat(response: Mapping[str, Any]) -> dict[str, Any]:
    """A Responses response as the equivalent chat-completions response (for the span)."""
    texts: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    # `token_ids` on the Response is how our policy server and the LLM proxy's translation return them.
    output_token_ids = _int_list(response.get("output_token_ids")) or _int_list(response.get("token_ids"))
    item_token_ids: list[int] = []
    for raw in response.get("output") or []:
        if not isinstance(raw, dict):
            continue
        item: dict[str, Any] = raw  # type: ignore[assignment]
        if item.get("type") == "message":
            texts.append(_text_of(item.get("content")))
        elif item.get("type") == "function_call":
            tool_calls.append(
                {
                    "id": item.get("call_id"),
                    "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments")},
                }
            )
        item_token_ids.extend(_int_list(item.get("token_ids")) or [])
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    status = response.get("status")
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "finish_reason": "tool_calls" if tool_calls else ("stop" if status == "completed" else status),
    }
    token_ids = output_token_ids if output_token_ids is not None else (item_token_ids or None)
    if token_ids is not None:
        choice["token_ids"] = token_ids
    chat: dict[str, Any] = {"id": response.get("id"), "model": response.get("model"), "choices": [choice]}
    usage = response.get("usage")
    if isinstance(usage, dict):
        prompt, completion = usage.get("input_tokens"), usage.get("output_tokens")  # type: ignore[union-attr]
        chat["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": usage.get("total_tokens"),
        }  # type: ignore[union-attr]
    prompt_token_ids = _int_list(response.get("prompt_token_ids")) or _int_list(response.get("input_token_ids"))
    if prompt_token_ids is not None:
        chat["prompt_token_ids"] = prompt_token_ids
    return chat


async def _post(runtime: ProxyRuntime, call: ProxyCall, deployment: Deployment) -> aiohttp.ClientResponse:
    """POST to `{api_base}/responses`, retrying transport errors and retryable statuses with backoff."""
    payload = dict(call.body)
    payload["model"] = deployment.backend_model
    headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
    if deployment.api_key:
        headers["Authorization"] = f"Bearer {deployment.api_key}"
    data = json.dumps(payload).encode("utf-8")
    attempts = runtime.num_retries + 1
    codes = runtime.retry_status_codes or frozenset()
    last_error: Optional[BaseException] = None
    for attempt in range(attempts):
        call.n_attempts = attempt + 1
        if attempt:
            await asyncio.sleep(RETRY_BACKOFF_SECONDS[min(attempt - 1, len(RETRY_BACKOFF_SECONDS) - 1)])
        try:
            response = await runtime.http_client().post(deployment.url("responses"), data=data, headers=headers)
        except _TRANSPORT_ERRORS as exc:
            last_error = exc
            continue
        if response.status in codes and attempt + 1 < attempts:
            response.close()
            continue
        return response
    raise ConnectionError(
        f"backend {deployment.api_base} is unreachable after {attempts} attempt(s): "
        f"{type(last_error).__name__}: {last_error}; is the model server running?"
    )


async def _record(runtime: ProxyRuntime, call: ProxyCall, response: Optional[dict[str, Any]]) -> None:
    call.end_time = time.time()
    call.response = responses_response_as_chat(response) if response is not None else None
    call.body = responses_request_as_chat(call.client_body)
    call.extra_attributes["gen_ai.request.type"] = "responses"
    await runtime.finish(call)


class _ResponsesStream:
    """Parses Responses SSE as it passes through; the final `response.*` event carries the whole response.

    A malformed event (not JSON, nested too deep) is relayed as is and counted in `malformed`.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self.final: Optional[dict[str, Any]] = None
        self.error: Optional[str] = None
        self.malformed = 0

    def feed(self, data: bytes) -> bool:
        """Consume bytes; True once the final event has been seen."""
        self._buffer += data.replace(b"\r\n", b"\n")
        while b"\n\n" in self._buffer:
            event, self._buffer = self._buffer.split(b"\n\n", 1)
            payload = b"\n".join(line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:"))
            try:
                parsed = json.loads(payload) if payload else None
            except (ValueError, RecursionError):
                self.malformed += 1
                continue
            if not isinstance(parsed, dict):
                continue
            chunk: dict[str, Any] = parsed  # type: ignore[assignment]
            if chunk.get("type") in _FINAL_EVENTS and isinstance(chunk.get("response"), dict):
                self.final = chunk["response"]
            elif chunk.get("type") == "error":
                self.error = str(chunk.get("message") or chunk)
        return self.final is not None


async def _relay(
    runtime: ProxyRuntime, call: ProxyCall, response: aiohttp.ClientResponse
) -> AsyncGenerator[bytes, None]:
    stream = _ResponsesStream()
    held: list[bytes] = []
    recorded = False
    try:
        async for chunk in response.content.iter_any():
            if held or stream.feed(chunk):
                held.append(chunk)  # the final event waits until the call is on record
            else:
                yield chunk
        call.status_code = response.status
        call.error = stream.error if stream.final is None else None
        if stream.final is None and call.error is None:
            call.error = "the backend stream ended without a final response event"
        if call.error is None and stream.malformed:
            call.error = f"the backend stream had {stream.malformed} malformed event(s) (not JSON); relayed as sent"
        recorded = True
        await asyncio.shield(runtime.spawn(_record(runtime, call, stream.final)))
        for chunk in held:
            yield chunk
    finally:
        response.release()
        if not recorded:
            call.status_code = response.status
            call.error = "the stream broke off before its final event"
            runtime.spawn(_record(runtime, call, stream.final))


async def forward_responses_call(runtime: ProxyRuntime, call: ProxyCall, deployment: Deployment) -> Response:
    """Forward a Responses request to `deployment` and answer the client, recording the call."""
    call.deployment = deployment
    try:
        response = await _post(runtime, call, deployment)
    except ConnectionError as exc:
        call.status_code, call.error = 502, str(exc)
        await _record(runtime, call, None)
        return error_response(502, str(exc), error_type="upstream_unavailable")
    is_sse = response.headers.get("content-type", "").startswith("text/event-stream")
    if call.client_stream and response.status < 400 and is_sse:
        return StreamingResponse(_relay(runtime, call, response), media_type="text/event-stream", headers=_SSE_HEADERS)
    content = await response.read()
    response.release()
    call.status_code = response.status
    parsed: Optional[dict[str, Any]] = None
    if response.status < 400:
        try:
            loaded = json.loads(content)
            parsed = loaded if isinstance(loaded, dict) else None
        except (ValueError, RecursionError):
            call.error = "the backend answered with a body that is not JSON"
    else:
        call.error = backend_error_message(content, response.status)
    await _record(runtime, call, parsed)
    content_type = response.headers.get("content-type")
    return Response(
        content, status_code=response.status, headers={"content-type": content_type} if content_type else {}
    )
