"""Forwarding one LLM call to its backend: retries, unary answers, and SSE relayed chunk by chunk.

A streamed answer reaches the client as the backend produces it, byte for byte, while a recorder
rebuilds the complete response (content, tool calls, usage, token ids) from the same bytes. Only the
terminating `data: [DONE]` event is held back until the call is recorded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator
from typing import Any, Optional

import aiohttp
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from agentlightning.web.pause import PauseGate

from .call import ENDPOINT_OF_KIND, ProxyCall
from .models import Deployment
from .runtime import ProxyRuntime
from .streaming import SSEResponseRecorder, response_to_sse_events
from .translation import SSE_HEADERS, StreamTranslator, client_error_response, translated_answer

__all__ = ["forward_call", "error_response", "backend_error_message", "RETRYABLE_STATUS_CODES", "ReleaseAtEnd"]

logger = logging.getLogger(__name__)

RETRYABLE_STATUS_CODES = frozenset({408, 429, 500, 502, 503, 504})
RETRY_BACKOFF_SECONDS = (0.1, 0.2, 0.5, 1.0, 2.0)
_DONE_MARKER = b"data: [DONE]"


def error_response(status_code: int, message: str, *, error_type: str, param: Optional[str] = None) -> JSONResponse:
    """An OpenAI-style error body, so OpenAI clients raise with the message."""
    return JSONResponse(
        {"error": {"message": message, "type": error_type, "param": param, "code": status_code}},
        status_code=status_code,
    )


class ReleaseAtEnd(Response):
    """Wraps a response (streamed ones included) so a pause gate counts the call until its last byte."""

    def __init__(self, inner: Response, gate: PauseGate) -> None:
        self.inner = inner
        self.gate = gate
        self.status_code = inner.status_code
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.inner(scope, receive, send)
        finally:
            self.gate.exit()


class BackendUnavailable(Exception):
    """No backend answered (connection refused, timeout...) after all retries."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out
        """The last try timed out (the backend was reachable but too slow)."""


_TRANSPORT_ERRORS = (aiohttp.ClientConnectionError, asyncio.TimeoutError, OSError)


async def _post(client: aiohttp.ClientSession, call: ProxyCall, deployment: Deployment) -> aiohttp.ClientResponse:
    """POST the call to `deployment`; the response body is left unread."""
    payload = dict(call.body)
    payload["model"] = deployment.backend_model
    headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
    if deployment.api_key:
        headers["Authorization"] = f"Bearer {deployment.api_key}"
    if deployment.extra_headers:
        headers.update(deployment.extra_headers)
    timeout = aiohttp.ClientTimeout(total=deployment.timeout) if deployment.timeout is not None else None
    return await client.request(
        "POST",
        deployment.url(ENDPOINT_OF_KIND[call.kind]),
        data=json.dumps(payload).encode("utf-8"),
        headers=headers,
        **({"timeout": timeout} if timeout is not None else {}),
    )


async def _send(runtime: ProxyRuntime, call: ProxyCall, deployments: list[Deployment]) -> aiohttp.ClientResponse:
    """The backend's response (body not read yet), retrying transport errors and retryable statuses."""
    client = runtime.http_client()
    attempts = runtime.num_retries + 1
    retry_status_codes = runtime.retry_status_codes or RETRYABLE_STATUS_CODES
    last_error: Optional[BaseException] = None
    for attempt in range(attempts):
        deployment = deployments[attempt % len(deployments)]
        call.deployment, call.n_attempts = deployment, attempt + 1
        if attempt:
            await asyncio.sleep(RETRY_BACKOFF_SECONDS[min(attempt - 1, len(RETRY_BACKOFF_SECONDS) - 1)])
        try:
            response = await _post(client, call, deployment)
        except _TRANSPORT_ERRORS as exc:
            last_error = exc
            logger.info(
                "backend %s for %r failed: %r (attempt %d/%d)",
                deployment.api_base,
                call.model,
                exc,
                attempt + 1,
                attempts,
            )
            continue
        if response.status in retry_status_codes and attempt + 1 < attempts:
            response.close()
            logger.info(
                "backend %s for %r answered HTTP %d (attempt %d/%d)",
                deployment.api_base,
                call.model,
                response.status,
                attempt + 1,
                attempts,
            )
            continue
        return response
    where = call.deployment.api_base if call.deployment is not None else "?"
    if isinstance(last_error, asyncio.TimeoutError):
        raise BackendUnavailable(
            f"backend {where} for model {call.model!r} did not answer within its timeout after {attempts} "
            f"attempt(s): {type(last_error).__name__}: {last_error}; raise the model's `timeout` or "
            "`litellm_settings.request_timeout`",
            timed_out=True,
        )
    raise BackendUnavailable(
        f"backend {where} for model {call.model!r} is unreachable after {attempts} attempt(s): "
        f"{type(last_error).__name__}: {last_error}; is the model server running?"
    )


def backend_error_message(content: bytes, status_code: int) -> str:
    """The message of a backend's error body (OpenAI's `{"error": {"message": ...}}`, else the body itself)."""
    try:
        body = json.loads(content)
    except (ValueError, RecursionError):
        return content.decode("utf-8", "replace")[:2000] or f"HTTP {status_code}"
    if isinstance(body, dict):
        error: Any = body.get("error", body)
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])  # type: ignore[index]
        return json.dumps(error)
    return json.dumps(body)


def _passthrough_headers(response: aiohttp.ClientResponse) -> dict[str, str]:
    content_type = response.headers.get("content-type")
    return {"content-type": content_type} if content_type else {}


async def _unary(runtime: ProxyRuntime, call: ProxyCall, response: aiohttp.ClientResponse) -> Response:
    try:
        content = await response.read()
    except _TRANSPORT_ERRORS + (aiohttp.ClientPayloadError,) as exc:
        response.close()
        call.timed_out = isinstance(exc, asyncio.TimeoutError)
        call.status_code, call.end_time = 504 if call.timed_out else 502, time.time()
        call.error = f"the backend's answer broke off: {type(exc).__name__}: {exc}"
        await runtime.finish(call)
        return client_error_response(call.client_api, call.status_code, call.error, error_type="upstream_error")
    response.release()
    call.status_code = response.status
    if response.status < 400:
        try:
            parsed = json.loads(content)
            call.response = parsed if isinstance(parsed, dict) else None
        except (ValueError, RecursionError):
            call.error = "the backend answered with a body that is not JSON"
    else:
        call.error = backend_error_message(content, response.status)
    call.end_time = time.time()
    await runtime.finish(call)
    if call.translated:
        return translated_answer(call)
    if call.client_stream and call.response is not None:  # converted, or a backend that does not stream
        include_usage = bool((call.client_body.get("stream_options") or {}).get("include_usage"))
        events = response_to_sse_events(call.kind, call.response, include_usage=include_usage)
        return Response(b"".join(events), media_type="text/event-stream", headers=SSE_HEADERS)
    return Response(content, status_code=response.status, headers=_passthrough_headers(response))


async def _finish_abandoned(
    runtime: ProxyRuntime, call: ProxyCall, response: aiohttp.ClientResponse, recorder: SSEResponseRecorder, error: str
) -> None:
    response.close()
    call.status_code = response.status
    call.response = recorder.to_response()
    call.error = error
    call.end_time = time.time()
    await runtime.finish(call)


class _Relay:
    """Relays one backend stream to the client; whatever happens to the exchange, the call gets recorded."""

    def __init__(self, runtime: ProxyRuntime, call: ProxyCall, response: aiohttp.ClientResponse) -> None:
        self.runtime = runtime
        self.call = call
        self.response = response
        self.parsed: list[dict[str, Any]] = []
        self.translator = StreamTranslator(call.client_api, call.client_body) if call.translated else None
        self.recorder = SSEResponseRecorder(call.kind, self.parsed.append if self.translator is not None else None)
        self.started = False
        self.body = self._chunks()

    async def _chunks(self) -> AsyncGenerator[bytes, None]:
        self.started = True
        runtime, call, response, recorder = self.runtime, self.call, self.response, self.recorder
        held: list[bytes] = []
        completed = False
        failure = "the client disconnected before the stream ended"
        translator = self.translator
        try:
            async for chunk in response.content.iter_any():
                if translator is not None:
                    recorder.feed(chunk)
                    translated = b"".join(self._translate(translator, parsed) for parsed in self.parsed)
                    self.parsed.clear()
                    if translated:
                        yield translated
                elif held:
                    held.append(chunk)
                elif recorder.feed(chunk):
                    cut = chunk.find(_DONE_MARKER)
                    if cut > 0:
                        yield chunk[:cut]
                        held.append(chunk[cut:])
                    else:
                        held.append(chunk)
                else:
                    yield chunk
            completed = True
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            failure = f"the backend stream broke: {type(exc).__name__}: {exc}"
            raise
        finally:
            if not completed:
                # Possibly cancelled: record in the background rather than awaiting here.
                runtime.spawn(_finish_abandoned(runtime, call, response, recorder, failure))
        response.release()
        call.status_code = response.status
        call.response = recorder.to_response()
        call.error = recorder.error
        call.end_time = time.time()
        # Shielded: a client leaving now must not keep the finished call from being recorded.
        await asyncio.shield(runtime.spawn(runtime.finish(call)))
        if translator is not None:
            failed = recorder.backend_error
            yield translator.error(failed) if failed is not None else translator.finish(call.response)
        for chunk in held:
            yield chunk

    def _translate(self, translator: StreamTranslator, parsed: dict[str, Any]) -> bytes:
        """One chunk in the client's format; a chunk the translator cannot take is left out and noted."""
        try:
            return translator.add_chunk(parsed)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            self.recorder.malformed.append(f"untranslatable chunk ({type(exc).__name__}: {exc})")
            return b""

    def close(self) -> None:
        """End of the exchange: close a relay the server stopped iterating (or never started)."""
        if self.started:
            self.runtime.spawn(self.body.aclose())
        else:
            failure = "the client disconnected before the stream started"
            self.runtime.spawn(_finish_abandoned(self.runtime, self.call, self.response, self.recorder, failure))


class _RelayResponse(StreamingResponse):
    """A streaming response that closes its relay when the exchange ends, however it ends."""

    def __init__(self, relay: _Relay, status_code: int) -> None:
        super().__init__(relay.body, status_code=status_code, media_type="text/event-stream", headers=SSE_HEADERS)
        self.relay = relay

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.relay.close()


async def forward_call(runtime: ProxyRuntime, call: ProxyCall, deployments: list[Deployment]) -> Response:
    """Send the call to its backend and answer the client (streamed or not), recording the call."""
    if deployments[0].via_litellm:
        from .litellm_backend import forward_with_litellm

        return await forward_with_litellm(runtime, call, deployments)
    try:
        response = await _send(runtime, call, deployments)
    except BackendUnavailable as exc:
        status = 504 if exc.timed_out else 502
        call.status_code, call.error, call.end_time, call.timed_out = status, str(exc), time.time(), exc.timed_out
        await runtime.finish(call)
        kind = "upstream_timeout" if exc.timed_out else "upstream_unavailable"
        return client_error_response(call.client_api, status, str(exc), error_type=kind)
    is_sse = response.headers.get("content-type", "").startswith("text/event-stream")
    if not call.backend_stream or response.status >= 400 or not is_sse:
        return await _unary(runtime, call, response)
    return _RelayResponse(_Relay(runtime, call, response), response.status)
