"""Our async wrapper returns the SDK's result even when another instrumentation sits between two of ours."""

from __future__ import annotations

from typing import Any

from opentelemetry import context as otel_context

from agentlightning.instrumentation.anthropic import MESSAGES_FORMAT
from agentlightning.instrumentation.llm_calls import wrap_async_call

_SUPPRESS = otel_context._SUPPRESS_INSTRUMENTATION_KEY  # type: ignore[attr-defined]


async def _sdk_create(**kwargs: Any) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": kwargs["model"]}


def _third_party_wrapper(wrapped: Any) -> Any:
    """What AgentOps' async wrapper does: under suppression it returns the wrapped call un-awaited."""

    async def awrapper(*args: Any, **kwargs: Any) -> Any:
        if otel_context.get_value(_SUPPRESS):
            return wrapped(*args, **kwargs)
        return await wrapped(*args, **kwargs)

    return awrapper


async def test_a_coroutine_handed_back_by_a_wrapper_in_between_is_awaited() -> None:
    inner = wrap_async_call(_sdk_create, MESSAGES_FORMAT, enabled=lambda: True)
    outer = wrap_async_call(_third_party_wrapper(inner), MESSAGES_FORMAT, enabled=lambda: True)

    result = await outer(model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}])

    assert result["id"] == "msg_1" and result["model"] == "m"


async def test_the_disabled_path_awaits_through_the_wrapper_too() -> None:
    inner = wrap_async_call(_sdk_create, MESSAGES_FORMAT, enabled=lambda: False)
    outer = wrap_async_call(_third_party_wrapper(inner), MESSAGES_FORMAT, enabled=lambda: False)
    token = otel_context.attach(otel_context.set_value(_SUPPRESS, True))
    try:
        result = await outer(model="m", max_tokens=8, messages=[])
    finally:
        otel_context.detach(token)

    assert result["id"] == "msg_1"
