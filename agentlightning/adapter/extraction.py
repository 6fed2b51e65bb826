"""Reading token ids, messages, logprobs and request/response metadata out of LLM-call spans.

One LLM call may be seen by several spans (a LangChain span around an OpenAI span, LiteLLM's
`litellm_request` around `raw_gen_ai_request`, two tracers on the same client). `build_triplet_fields`
merges them: each field comes from the first span that has it, spans with token ids first.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from agentlightning.attributes.genai import (
    AGL_LOGPROBS,
    AGL_LOSS_MASK,
    AGL_PROMPT_TOKEN_IDS,
    AGL_RESPONSE_TOKEN_IDS,
    event_messages,
    system_instructions_message,
    to_openai_messages,
)
from agentlightning.attributes.otel import filter_and_unflatten_attributes
from agentlightning.semconv import (
    LOGPROBS_CONTENT,
    LOGPROBS_REFUSAL,
    PROMPT_TOKEN_IDS,
    RESPONSE_TOKEN_IDS,
    LightningSpanAttributes,
)
from agentlightning.types import Span

__all__ = [
    "parse_literal",
    "prompt_token_ids_of",
    "response_token_ids_of",
    "prompt_content_of",
    "completion_content_of",
    "logprobs_of",
    "request_metadata_of",
    "response_metadata_of",
    "usage_of",
    "image_urls_of",
    "build_triplet_fields",
]

_OP_INPUT = LightningSpanAttributes.OPERATION_INPUT.value
_OP_OUTPUT = LightningSpanAttributes.OPERATION_OUTPUT.value
_PROVIDER_KEY = re.compile(r"^llm\.([A-Za-z0-9_\-]+)\.(prompt_token_ids|response_token_ids|messages|choices)$")
_TOKEN_IDS_IN_TEXT = re.compile(r"""['"]?token_ids['"]?\s*[:=]\s*\[([0-9,\s]*)\]""")


def parse_literal(value: Any) -> Any:
    """Decode a JSON or Python-literal string (LiteLLM stores `str(list)`); other values pass through."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not text or text[0] not in "[{":
        return value
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value


def _unflatten(attributes: Mapping[str, Any], prefix: str) -> Any:
    """The value at `prefix`, whether stored whole or flattened into `prefix.*` keys; None if absent."""
    if prefix in attributes:
        return parse_literal(attributes[prefix])
    dotted = prefix + "."
    if not any(key.startswith(dotted) for key in attributes):
        return None
    try:
        return filter_and_unflatten_attributes(attributes, prefix)
    except ValueError:
        return {key[len(dotted) :]: value for key, value in attributes.items() if key.startswith(dotted)}


def _as_token_ids(value: Any) -> Optional[list[int]]:
    """A flat list of ints from a list, a list of lists (first choice), a dict keyed 0..n or a literal string."""
    value = parse_literal(value)
    if isinstance(value, str):
        match = _TOKEN_IDS_IN_TEXT.search(value)
        if match is None:
            return None
        return [int(token) for token in match.group(1).replace(",", " ").split()]
    if isinstance(value, Mapping):
        keys = list(value.keys())  # type: ignore[union-attr]
        if keys and all(isinstance(k, str) and k.isdigit() for k in keys):
            value = [value[k] for k in sorted(keys, key=int)]  # type: ignore[index]
        else:
            return None
    if isinstance(value, (list, tuple)):
        items = list(value)  # type: ignore[arg-type]
        if items and isinstance(items[0], (list, tuple)):
            return _as_token_ids(items[0])
        if all(isinstance(item, int) and not isinstance(item, bool) for item in items):
            return [int(item) for item in items]
    return None


def _provider_keys(attributes: Mapping[str, Any], field: str) -> list[str]:
    return [key for key in attributes if (m := _PROVIDER_KEY.match(key)) is not None and m.group(2) == field]


def _first_choice(choices: Any) -> Optional[Mapping[str, Any]]:
    choices = parse_literal(choices)
    if isinstance(choices, (list, tuple)) and choices and isinstance(choices[0], Mapping):
        return choices[0]  # type: ignore[return-value]
    if isinstance(choices, Mapping) and isinstance(choices.get("0"), Mapping):  # type: ignore[union-attr]
        return choices["0"]  # type: ignore[index,return-value]
    return None


def _token_ids_from_choice(choice: Mapping[str, Any]) -> Optional[list[int]]:
    ids = _as_token_ids(choice.get("token_ids"))
    if ids is None and isinstance(choice.get("provider_specific_fields"), Mapping):
        ids = _as_token_ids(choice["provider_specific_fields"].get("token_ids"))
    return ids


def prompt_token_ids_of(span: Span) -> Optional[list[int]]:
    """Prompt token ids: ours/AgentOps `prompt_token_ids`, Weave operation output, LiteLLM `llm.<provider>.*`."""
    attributes = span.attributes
    candidates = [
        PROMPT_TOKEN_IDS,
        AGL_PROMPT_TOKEN_IDS,
        f"{_OP_OUTPUT}.{PROMPT_TOKEN_IDS}",
        *_provider_keys(attributes, PROMPT_TOKEN_IDS),
    ]
    for key in candidates:
        ids = _as_token_ids(_unflatten(attributes, key))
        if ids is not None:
            return ids
    return None


def response_token_ids_of(span: Span) -> Optional[list[int]]:
    """Response token ids, including vLLM's `choices[0].token_ids` and `provider_specific_fields.token_ids`."""
    attributes = span.attributes
    for key in (
        RESPONSE_TOKEN_IDS,
        AGL_RESPONSE_TOKEN_IDS,
        f"{_OP_OUTPUT}.{RESPONSE_TOKEN_IDS}",
        *_provider_keys(attributes, RESPONSE_TOKEN_IDS),
    ):
        ids = _as_token_ids(_unflatten(attributes, key))
        if ids is not None:
            return ids
    for key in (f"{_OP_OUTPUT}.choices", "choices", *_provider_keys(attributes, "choices")):
        value = _unflatten(attributes, key)
        choice = _first_choice(value)
        if choice is not None:
            ids = _token_ids_from_choice(choice)
            if ids is not None:
                return ids
        elif isinstance(value, str):
            ids = _as_token_ids(value)
            if ids is not None:
                return ids
    return None


def _openinference_messages(value: Any) -> Any:
    """OpenInference nests each message under `message`; unwrap to plain `{role, content, ...}` dicts."""
    if isinstance(value, list):
        return [item.get("message", item) if isinstance(item, Mapping) else item for item in value]  # type: ignore[union-attr]
    return value


def _genai_input_messages(attributes: Mapping[str, Any]) -> Any:
    """`gen_ai.input.messages` (typed parts, current GenAI conventions) as OpenAI messages, with the
    `gen_ai.system_instructions` in front."""
    value = to_openai_messages(_unflatten(attributes, "gen_ai.input.messages"))
    instructions = system_instructions_message(attributes.get("gen_ai.system_instructions"))
    if instructions is not None:
        return [instructions, *(value if isinstance(value, list) else [])]  # type: ignore[misc]
    return value


def prompt_content_of(span: Span) -> Any:
    """The request messages (unflattened), from whichever convention the span uses; None if absent.

    GenAI messages that came as events (span events, or OTLP log events folded into the span) count too.
    """
    attributes = span.attributes
    for reader in (
        lambda: _unflatten(attributes, "gen_ai.prompt"),
        lambda: _genai_input_messages(attributes),
        lambda: _unflatten(attributes, f"{_OP_INPUT}.messages"),
    ):
        value = reader()
        if value is not None:
            return value
    value = _unflatten(attributes, "llm.input_messages")
    if value is not None:
        return _openinference_messages(value)
    for key in _provider_keys(attributes, "messages"):
        return parse_literal(attributes[key])
    return event_messages(span.events)[0] if span.events else None


def completion_content_of(span: Span) -> Any:
    """The response choices/messages (unflattened); None if absent (GenAI events count, as for prompts)."""
    attributes = span.attributes
    for key in ("gen_ai.completion", "gen_ai.output.messages", f"{_OP_OUTPUT}.choices"):
        value = _unflatten(attributes, key)
        if value is not None:
            return to_openai_messages(value) if key == "gen_ai.output.messages" else value
    value = _unflatten(attributes, "llm.output_messages")
    if value is not None:
        return _openinference_messages(value)
    for key in _provider_keys(attributes, "choices"):
        return parse_literal(attributes[key])
    return event_messages(span.events)[1] if span.events else None


def logprobs_of(span: Span) -> Optional[dict[str, Any]]:
    """Logprobs as `{"content": [...], "refusal": [...]}` (JSON-decoded) when the span carries them."""
    attributes = span.attributes
    result: dict[str, Any] = {}
    for field, key in (("content", LOGPROBS_CONTENT), ("refusal", LOGPROBS_REFUSAL), ("content", AGL_LOGPROBS)):
        if key in attributes and field not in result:
            result[field] = parse_literal(attributes[key])
    if not result:
        for key in _provider_keys(attributes, "choices"):
            choice = _first_choice(attributes[key])
            if choice is not None and isinstance(choice.get("logprobs"), Mapping):
                return dict(choice["logprobs"])
    return result or None


def _section(span: Span, prefix: str, exclude: Sequence[str]) -> Optional[dict[str, Any]]:
    value = _unflatten(span.attributes, prefix)
    if not isinstance(value, Mapping):
        return None
    section = {key: item for key, item in value.items() if key not in exclude}  # type: ignore[union-attr]
    return section or None


def request_metadata_of(span: Span) -> Optional[dict[str, Any]]:
    """`gen_ai.request.*` without the messages."""
    return _section(span, "gen_ai.request", ("messages", "prompt"))


def response_metadata_of(span: Span) -> Optional[dict[str, Any]]:
    """`gen_ai.response.*` without choices and token ids."""
    return _section(span, "gen_ai.response", ("choices", "token_ids", PROMPT_TOKEN_IDS, RESPONSE_TOKEN_IDS))


def usage_of(span: Span) -> Optional[dict[str, Any]]:
    """`gen_ai.usage.*` token counts."""
    return _section(span, "gen_ai.usage", ())


def image_urls_of(content: Any) -> list[str]:
    """Image URLs referenced by `image_url` parts anywhere in the prompt messages."""
    urls: list[str] = []

    def visit(node: Any) -> None:
        node = parse_literal(node)
        if isinstance(node, Mapping):
            image = node.get("image_url")  # type: ignore[union-attr]
            if isinstance(image, Mapping) and isinstance(image.get("url"), str):
                urls.append(image["url"])  # type: ignore[index]
            elif isinstance(image, str) and node.get("type") == "image_url":  # type: ignore[union-attr]
                urls.append(image)
            for child in node.values():  # type: ignore[union-attr]
                if child is not image:
                    visit(child)
        elif isinstance(node, (list, tuple)):
            for child in node:  # type: ignore[union-attr]
                visit(child)

    visit(content)
    return urls


def _first(spans: Sequence[Span], reader: Any) -> Any:
    for span in spans:
        value = reader(span)
        if value is not None:
            return value
    return None


def build_triplet_fields(members: Sequence[Span]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Prompt, response and metadata dicts for one LLM call seen by `members` (anchor first)."""
    ordered = sorted(
        members,
        key=lambda s: (prompt_token_ids_of(s) is None and response_token_ids_of(s) is None, members.index(s)),
    )
    prompt_content = _first(ordered, prompt_content_of)
    prompt: dict[str, Any] = {
        "token_ids": _first(ordered, prompt_token_ids_of) or [],
        "raw_content": prompt_content,
        "image_urls": image_urls_of(prompt_content) if prompt_content is not None else [],
    }
    response: dict[str, Any] = {
        "token_ids": _first(ordered, response_token_ids_of) or [],
        "raw_content": _first(ordered, completion_content_of),
    }
    logprobs = _first(ordered, logprobs_of)
    if logprobs is not None:
        response["logprobs"] = logprobs
    loss_mask = _first(ordered, lambda span: _as_token_ids(span.attributes.get(AGL_LOSS_MASK)))
    if loss_mask is not None:
        response["loss_mask"] = loss_mask
    metadata: dict[str, Any] = {}
    for field, reader in (("request", request_metadata_of), ("response", response_metadata_of), ("usage", usage_of)):
        value = _first(ordered, reader)
        if value is not None:
            metadata[field] = value
    return prompt, response, metadata
