"""Forwarding a call through LiteLLM, for model-list entries that are not OpenAI-compatible backends.

Anthropic, Azure, Gemini, Bedrock... entries (or entries with LiteLLM-only options) are served with
`litellm.acompletion(**litellm_params, **request)`: the client still speaks chat completions (or the
Responses / Messages API, translated), the call is recorded as the same span as on the fast path, and a
stream is relayed chunk by chunk. LiteLLM is imported lazily in the serving process, only when such an
entry is called; it is told to use its bundled model price map instead of downloading one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator
from typing import Any, Optional

from starlette.responses import JSONResponse, Response, StreamingResponse

from agentlightning.instrumentation.litellm import capture_prompt_token_ids
from agentlightning.instrumentation.openai_chat import ChatCompletionAccumulator

from .call import ProxyCall
from .models import OPENAI_COMPATIBLE_PROVIDERS, Deployment, apply_litellm_settings, import_litellm
from .runtime import ProxyRuntime
from .streaming import response_to_sse_events
from .translation import SSE_HEADERS, StreamTranslator, client_error_response, translated_answer

__all__ = ["forward_with_litellm", "apply_litellm_settings"]

logger = logging.getLogger(__name__)

_RETRYABLE = frozenset({408, 409, 429, 500, 502, 503, 504})
_BACKOFF_SECONDS = (0.1, 0.2, 0.5, 1.0, 2.0)
# Fields of our backends (vLLM) that other providers reject.
_VLLM_ONLY_FIELDS = ("return_token_ids", "top_k", "min_p", "repetition_penalty")


def _arguments(call: ProxyCall, deployment: Deployment, runtime: ProxyRuntime) -> dict[str, Any]:
    params = dict(deployment.litellm_params or {})
    request = {k: v for k, v in call.body.items() if k != "model" and k not in _VLLM_ONLY_FIELDS}
    arguments = {**params, **request, "model": deployment.backend_model}
    vllm_fields = {k: call.body[k] for k in _VLLM_ONLY_FIELDS if k in call.body}
    if vllm_fields and deployment.provider in OPENAI_COMPATIBLE_PROVIDERS:
        # A vLLM-style server behind LiteLLM (e.g. an entry with `rpm`): keep asking it for token ids.
        arguments["extra_body"] = {**dict(arguments.get("extra_body") or {}), **vllm_fields}
    arguments.setdefault("timeout", runtime.request_timeout)
    if call.kind == "completion":
        arguments.pop("stream", None)
        arguments.pop("stream_options", None)
    return arguments


def _status_of(exc: BaseException) -> Optional[int]:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def _dump(result: Any) -> dict[str, Any]:
    dump = getattr(result, "model_dump", None)
    data = dump() if callable(dump) else result
    return json.loads(json.dumps(data, default=str)) if isinstance(data, dict) else {}


async def _finish(runtime: ProxyRuntime, call: ProxyCall) -> None:
    call.end_time = time.time()
    await runtime.finish(call)


def _error(call: ProxyCall) -> Response:
    status = call.status_code if call.status_code is not None and call.status_code >= 400 else 502
    return client_error_response(
        call.client_api, status, call.error or "LiteLLM call failed", error_type="upstream_error"
    )


async def _call_with_retries(runtime: ProxyRuntime, call: ProxyCall, deployments: list[Deployment]) -> Any:
    """LiteLLM's result, or None after recording the failure on `call`."""
    litellm = import_litellm()
    attempts = runtime.num_retries + 1
    for attempt in range(attempts):
        deployment = deployments[attempt % len(deployments)]
        call.deployment, call.n_attempts = deployment, attempt + 1
        if attempt:
            await asyncio.sleep(_BACKOFF_SECONDS[min(attempt - 1, len(_BACKOFF_SECONDS) - 1)])
        arguments = _arguments(call, deployment, runtime)
        try:
            if call.kind == "completion":
                return await litellm.atext_completion(**arguments)
            return await litellm.acompletion(**arguments)
        except Exception as exc:
            status = _status_of(exc)
            logger.info(
                "LiteLLM call to %s failed: %r (attempt %d/%d)", deployment.backend_model, exc, attempt + 1, attempts
            )
            if (status is None or status in _RETRYABLE) and attempt + 1 < attempts:
                continue
            call.timed_out = "Timeout" in type(exc).__name__  # litellm.Timeout
            call.status_code = status or (504 if call.timed_out else 502)
            call.error = f"{type(exc).__name__}: {exc}"
    return None


async def forward_with_litellm(runtime: ProxyRuntime, call: ProxyCall, deployments: list[Deployment]) -> Response:
    """Serve `call` through `litellm.acompletion` (or `atext_completion`), recording it like the fast path."""
    if call.kind == "completion" and call.client_stream:
        call.convert_stream = True  # LiteLLM text completions are answered whole, then replayed as SSE
    result = await _call_with_retries(runtime, call, deployments)
    if result is None:
        await _finish(runtime, call)
        return _error(call)
    if call.backend_stream:
        return StreamingResponse(_relay(runtime, call, result), media_type="text/event-stream", headers=SSE_HEADERS)
    call.status_code = 200
    call.response = _dump(result)
    await _finish(runtime, call)
    if call.translated:
        return translated_answer(call)
    if call.client_stream:
        include_usage = bool((call.client_body.get("stream_options") or {}).get("include_usage"))
        events = response_to_sse_events(call.kind, call.response, include_usage=include_usage)
        return Response(b"".join(events), media_type="text/event-stream", headers=SSE_HEADERS)
    return JSONResponse(call.response)


async def _relay(runtime: ProxyRuntime, call: ProxyCall, stream: Any) -> AsyncGenerator[bytes, None]:
    """LiteLLM's chunks to the client as they come (chat SSE, or translated events); recorded at the end."""
    accumulator = ChatCompletionAccumulator()
    capture_prompt_token_ids(stream, accumulator)
    translator = StreamTranslator(call.client_api, call.client_body) if call.translated else None
    recorded = False
    try:
        try:
            async for chunk in stream:
                data = _dump(chunk)
                accumulator.add(data)
                yield (
                    translator.add_chunk(data)
                    if translator is not None
                    else b"data: " + json.dumps(data).encode() + b"\n\n"
                )
        except Exception as exc:
            call.error = f"the LiteLLM stream broke: {type(exc).__name__}: {exc}"
        call.status_code = 200 if call.error is None else 502
        call.response = accumulator.to_response()
        recorded = True
        await asyncio.shield(runtime.spawn(_finish(runtime, call)))
        if translator is not None:
            yield translator.error(call.error) if call.error is not None else translator.finish(call.response)
        else:
            if call.error is not None:
                yield (
                    b"data: "
                    + json.dumps({"error": {"message": call.error, "type": "upstream_error"}}).encode()
                    + b"\n\n"
                )
            yield b"data: [DONE]\n\n"
    finally:
        if not recorded:
            call.response = accumulator.to_response()
            call.error = call.error or "the client disconnected before the stream ended"
            runtime.spawn(_finish(runtime, call))
