"""The spans recorded for one proxied LLM call.

The call span carries the same `gen_ai.*` / token-id attributes our OpenAI instrumentation writes, so
adapters treat proxy spans and tracer spans alike. As v0.3 (LiteLLM's OpenTelemetry callback), a successful
call also gets a `raw_gen_ai_request` child span holding the backend request and response as
`llm.<provider>.<key>` attributes (non-primitive values as `str(value)`); it shares the call's sequence id
and is part of the same call for every reader (adapters merge it into its parent, never count it twice).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Optional

from agentlightning.attributes.genai import latest_genai_attributes, latest_genai_enabled
from agentlightning.instrumentation.openai_chat import LLM_SPAN_NAME, request_to_attributes, response_to_attributes
from agentlightning.semconv import AGL_TIMEOUT_LOCATION, RAW_GEN_AI_REQUEST, LightningResourceAttributes
from agentlightning.types import Attributes, OtelResource, Span, TraceStatus

from .call import ProxyCall

__all__ = [
    "CHAT_SPAN_NAME",
    "COMPLETION_SPAN_NAME",
    "PROXY_ATTRIBUTE_PREFIX",
    "PROXY_TRACER_NAME",
    "RAW_REQUEST_SPAN_NAME",
    "build_call_span",
    "build_raw_request_span",
    "parse_traceparent",
]

CHAT_SPAN_NAME = LLM_SPAN_NAME
"""`openai.chat.completion`, the name every triplet adapter matches by default."""
COMPLETION_SPAN_NAME = "openai.completion"
PROXY_ATTRIBUTE_PREFIX = "agentlightning.llm_proxy"
PROXY_TRACER_NAME = "agentlightning.llm_proxy"
RAW_REQUEST_SPAN_NAME = RAW_GEN_AI_REQUEST
"""`raw_gen_ai_request`: v0.3's (LiteLLM's) name for the raw provider request span."""

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")


def parse_traceparent(value: Optional[str]) -> Optional[tuple[str, str]]:
    """(trace id, parent span id) of a W3C `traceparent` header, None when absent or malformed."""
    if not value:
        return None
    match = _TRACEPARENT.match(value.strip().lower())
    if match is None or set(match.group(1)) == {"0"} or set(match.group(2)) == {"0"}:
        return None
    return match.group(1), match.group(2)


def _completion_as_chat_request(body: Mapping[str, Any]) -> dict[str, Any]:
    prompt = body.get("prompt")
    request = {k: v for k, v in body.items() if k != "prompt"}
    if isinstance(prompt, list) and len(prompt) == 1:  # type: ignore[arg-type]
        prompt = prompt[0]  # type: ignore[index]
    request["messages"] = [{"role": "user", "content": prompt}]
    return request


def _completion_as_chat_response(response: Mapping[str, Any]) -> dict[str, Any]:
    chat = dict(response)
    chat["choices"] = [
        {**choice, "message": {"role": "assistant", "content": choice.get("text")}}
        for choice in response.get("choices") or []
        if isinstance(choice, dict)
    ]
    return chat


def _proxy_attributes(call: ProxyCall) -> Attributes:
    attributes: Attributes = {
        f"{PROXY_ATTRIBUTE_PREFIX}.stream": call.client_stream,
        f"{PROXY_ATTRIBUTE_PREFIX}.stream_converted": call.convert_stream,
        f"{PROXY_ATTRIBUTE_PREFIX}.attempts": call.n_attempts,
    }
    if call.translated:
        # The client spoke the Responses / Messages API; the span records the chat completion it became.
        attributes[f"{PROXY_ATTRIBUTE_PREFIX}.client_api"] = call.client_api
    if call.deployment is not None:
        attributes[f"{PROXY_ATTRIBUTE_PREFIX}.backend_model"] = call.deployment.backend_model
        attributes[f"{PROXY_ATTRIBUTE_PREFIX}.api_base"] = call.deployment.api_base
    if call.status_code is not None:
        attributes["http.response.status_code"] = call.status_code
    return attributes


def build_call_span(call: ProxyCall, sequence_id: int) -> Span:
    """The stored span of a finished call (request, response, token ids, logprobs, ids, status)."""
    assert call.rollout_id is not None and call.attempt_id is not None
    if call.kind == "chat":
        name = CHAT_SPAN_NAME
        attributes = request_to_attributes(call.body)
        if call.response is not None:
            attributes.update(response_to_attributes(call.response))
    else:
        name = COMPLETION_SPAN_NAME
        attributes = request_to_attributes(_completion_as_chat_request(call.body))
        attributes["gen_ai.request.type"] = "completion"
        if call.response is not None:
            attributes.update(response_to_attributes(_completion_as_chat_response(call.response)))
    # The model clients asked for (the backend's own name is under agentlightning.llm_proxy.backend_model).
    attributes["gen_ai.request.model"] = call.model
    attributes.update(_proxy_attributes(call))
    attributes.update(call.extra_attributes)
    if latest_genai_enabled():
        attributes.update(latest_genai_attributes(attributes))
    if call.timed_out:  # algorithms discard the rollout as timed out instead of training on its reward
        attributes[AGL_TIMEOUT_LOCATION] = "llm_call"
    if call.error is not None:
        attributes["error.type"] = f"http_{call.status_code}" if call.status_code else "proxy_error"
        attributes["error.message"] = call.error
        status = TraceStatus(status_code="ERROR", description=call.error[:1000])
    else:
        status = TraceStatus(status_code="OK")
    resource = OtelResource(
        attributes={
            LightningResourceAttributes.ROLLOUT_ID.value: call.rollout_id,
            LightningResourceAttributes.ATTEMPT_ID.value: call.attempt_id,
            LightningResourceAttributes.SPAN_SEQUENCE_ID.value: sequence_id,
            LightningResourceAttributes.TRACER_NAME.value: PROXY_TRACER_NAME,
        }
    )
    return Span.from_attributes(
        attributes=attributes,
        rollout_id=call.rollout_id,
        attempt_id=call.attempt_id,
        sequence_id=sequence_id,
        trace_id=call.trace_id,
        parent_id=call.parent_span_id,
        start_time=call.start_time,
        end_time=call.end_time,
        resource=resource,
        name=name,
        status=status,
    )


def _raw_value(value: Any) -> Any:
    """LiteLLM's attribute value: primitives as they are, None as "", anything else as `str(value)`."""
    if value is None:
        return ""
    if isinstance(value, (str, bool, int, float)):
        return value
    return str(value)


def build_raw_request_span(call: ProxyCall, call_span: Span) -> Optional[Span]:
    """The `raw_gen_ai_request` child of `call_span`: backend request and response as `llm.<provider>.<key>`.

    None for a call without a response (failed calls get no raw span, as with LiteLLM). Request keys are
    written first, so a key in both (`model`) holds the response's value, as LiteLLM writes them.
    """
    if call.response is None or call.error is not None:
        return None
    deployment = call.deployment
    provider = deployment.provider if deployment is not None else "openai"
    request = dict(call.body)
    if deployment is not None:
        request["model"] = deployment.backend_model.removeprefix(f"{provider}/")  # as the backend was asked
    attributes: Attributes = {}
    for payload in (request, call.response):
        for key, value in payload.items():
            attributes[f"llm.{provider}.{key}"] = _raw_value(value)
    return Span.from_attributes(
        attributes=attributes,
        rollout_id=call_span.rollout_id,
        attempt_id=call_span.attempt_id,
        sequence_id=call_span.sequence_id,
        trace_id=call_span.trace_id,
        parent_id=call_span.span_id,
        start_time=call_span.start_time,
        end_time=call_span.end_time,
        resource=call_span.resource.model_copy(deep=True),
        name=RAW_REQUEST_SPAN_NAME,
        status=TraceStatus(status_code="OK"),
    )
