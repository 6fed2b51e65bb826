"""Recognising LLM-call spans, their response ids and the agent they run in, across instrumentation flavours.

Flavours covered: our OpenAI instrumentation and the LLM proxy (`openai.chat.completion` + `gen_ai.*`,
`prompt_token_ids`...), AgentOps (`openai.chat.completion`, LangChain callback spans `chat_model.llm` /
`llm.llm` with JSON `gen_ai.prompt`), OpenLLMetry (`openai.chat`, LangChain `ChatOpenAI.chat`, newer
`gen_ai.input.messages`), OpenInference (`llm.input_messages.*`, `openinference.span.kind=LLM`), LiteLLM
(`litellm_request`, `raw_gen_ai_request` with `llm.<provider>.*`), Weave-converted operations, and the
official OpenTelemetry GenAI instrumentations (`chat <model>` spans with `gen_ai.operation.name`, messages
as `gen_ai.input.messages` / `gen_ai.output.messages` or as events).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Optional

from agentlightning.semconv import LightningSpanAttributes
from agentlightning.types import Span

__all__ = [
    "DEFAULT_LLM_CALL_MATCH",
    "SPEC_LLM_CALL_MATCH",
    "looks_like_llm_call",
    "response_id_of",
    "agent_name_of",
]

SPEC_LLM_CALL_MATCH = r"openai\.chat\.completion"
"""The reference's default name pattern (our OpenAI instrumentation and AgentOps' OpenAI spans)."""

DEFAULT_LLM_CALL_MATCH = (
    r"openai\.chat\.completion"  # ours, AgentOps
    r"|^openai\.chat$|^openai\.completion$"  # OpenLLMetry OpenAI
    r"|^openai\.(Chat)?Completion\.a?create$"  # AgentOps openai<1 wrappers
    r"|^ChatCompletion$"  # OpenInference OpenAI
    r"|^(chat_model|llm)\.llm$"  # AgentOps LangChain callback handler
    r"|\.(chat|completion)$"  # OpenLLMetry LangChain (ChatOpenAI.chat, OpenAI.completion)
    r"|^raw_gen_ai_request$|^litellm_request$"  # LiteLLM / LLM proxy
    r"|^openai\.responses$|^anthropic\.messages$|^litellm\.completion$"  # ours: Responses, Anthropic, LiteLLM
)
"""Span names recognised as LLM calls by default; spans carrying LLM request/response attributes are recognised
too, whatever their name (see `looks_like_llm_call`)."""

# Attribute keys (exact, or prefixes of flattened keys) that only an LLM call carries.
_LLM_KEY_PREFIXES = (
    "gen_ai.prompt",
    "gen_ai.completion",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "llm.input_messages",
    "llm.output_messages",
    "prompt_token_ids",
    "response_token_ids",
    "agentlightning.operation.output.prompt_token_ids",
    "agentlightning.operation.output.response_token_ids",
    "agentlightning.gen_ai.prompt_token_ids",
    "agentlightning.gen_ai.response_token_ids",
)
_PROVIDER_RAW_KEY = re.compile(r"^llm\.[A-Za-z0-9_\-]+\.(prompt_token_ids|response_token_ids|messages|choices)$")
_LLM_KIND_ATTRIBUTES: dict[str, frozenset[str]] = {
    "openinference.span.kind": frozenset({"LLM", "llm"}),
    "agentops.span.kind": frozenset({"llm", "llm.call"}),
    "gen_ai.operation.name": frozenset({"chat", "text_completion", "generate_content"}),
    "llm.request.type": frozenset({"chat", "completion"}),
    "gen_ai.request.type": frozenset({"chat", "completion", "responses", "messages"}),
}


def _has_key_or_prefix(attributes: Mapping[str, Any], key: str) -> bool:
    if key in attributes:
        return True
    dotted = key + "."
    return any(name.startswith(dotted) for name in attributes)


def looks_like_llm_call(span: Span) -> bool:
    """Whether the span carries LLM request/response data (messages, completions, token ids) or an LLM kind."""
    attributes = span.attributes
    if not attributes:
        return False
    for key, values in _LLM_KIND_ATTRIBUTES.items():
        if str(attributes.get(key, "")) in values:
            return True
    if any(_has_key_or_prefix(attributes, prefix) for prefix in _LLM_KEY_PREFIXES):
        return True
    return any(_PROVIDER_RAW_KEY.match(key) for key in attributes)


_RESPONSE_ID_KEYS = (
    "gen_ai.response.id",
    f"{LightningSpanAttributes.OPERATION_OUTPUT.value}.id",
    "llm.response.id",
)


# LiteLLM's raw provider span: `llm.<provider>.id` (e.g. `llm.hosted_vllm.id`, `llm.openai.id`).
_PROVIDER_RESPONSE_ID_KEY = re.compile(r"^llm\.[A-Za-z0-9_\-]+\.id$")


def response_id_of(span: Span) -> Optional[str]:
    """The provider's response id (`chatcmpl-...`) the span reports, used to recognise one call seen twice.

    Read from `gen_ai.response.id`, an operation's output id, `llm.response.id`, or LiteLLM's raw provider
    attributes `llm.<provider>.id` (vLLM: `llm.hosted_vllm.id`).
    """
    for key in _RESPONSE_ID_KEYS:
        value = span.attributes.get(key)
        if isinstance(value, str) and value:
            return value
    for key, value in span.attributes.items():
        if _PROVIDER_RESPONSE_ID_KEY.match(key) and isinstance(value, str) and value:
            return value
    return None


def agent_name_of(span: Span) -> Optional[str]:
    """The agent this span represents, if it is an agent span in any supported framework."""
    attributes = span.attributes
    name = attributes.get("agent.name") or attributes.get("gen_ai.agent.name")
    if isinstance(name, str) and name:
        return name
    if attributes.get("agentops.span.kind") == "agent":
        name = attributes.get("operation.name") or attributes.get("agentops.operation.name")
        if isinstance(name, str) and name:
            return name
    for key in ("recipient_agent_type", "langchain.chain.type", "executor.id"):  # AutoGen, LangChain, Agent Framework
        name = attributes.get(key)
        if isinstance(name, str) and name:
            return name
    if attributes.get("type") == "agent":  # Weave-converted call
        name = (
            attributes.get(f"{LightningSpanAttributes.OPERATION_INPUT.value}.name")
            or attributes.get(LightningSpanAttributes.OPERATION_NAME.value)
            or span.name
        )
        if isinstance(name, str) and name:
            return name
    if span.name.startswith("langchain.Chain."):  # Weave-converted LangChain chain
        name = attributes.get("lc_name")
        if isinstance(name, str) and name:
            return name
    return None
