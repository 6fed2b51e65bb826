"""Token ids for LLM calls recorded without them, from the policy's tokenizer, flagged as such.

A call that went through the policy server, the gateway or the LLM proxy carries the token ids the model
saw and produced. A call recorded only by an agent's own instrumentation (the official OpenTelemetry GenAI
instrumentations record messages, never token ids) has none; for RL it is retokenized: the prompt messages
through the tokenizer's chat template with the generation prompt, the completion as the tokens the
template adds for the assistant's reply. Such a triplet gets `metadata["token_ids_source"] = "retokenized"`
and no logprobs; a learner recomputes them. Retokenized ids may differ from what the model actually
sampled (different text normalisation, tool-call formatting), which is why they are never silent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from agentlightning.types import Triplet

__all__ = ["TOKEN_IDS_SOURCE", "RETOKENIZED", "retokenize_triplets", "chat_messages"]

logger = logging.getLogger(__name__)

TOKEN_IDS_SOURCE = "token_ids_source"
"""Triplet metadata key; "retokenized" when the ids were rebuilt from text, absent when recorded."""
RETOKENIZED = "retokenized"


def _tool_calls(calls: Any) -> list[dict[str, Any]]:
    fixed: list[dict[str, Any]] = []
    for call in calls.values() if isinstance(calls, Mapping) else calls or []:  # type: ignore[union-attr]
        if not isinstance(call, Mapping):
            continue
        function = call.get("function") if isinstance(call.get("function"), Mapping) else call
        arguments = function.get("arguments")  # type: ignore[union-attr]
        fixed.append(
            {
                "id": call.get("id"),
                "type": "function",
                "function": {
                    "name": function.get("name"),  # type: ignore[union-attr]
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
        )
    return fixed


def chat_messages(raw: Any) -> Optional[list[dict[str, Any]]]:
    """Recorded prompt/completion content as chat-template messages (`{role, content[, tool_calls]}`)."""
    if isinstance(raw, Mapping) and raw and all(str(k).isdigit() for k in raw):  # flattened `0`, `1`, ...
        raw = [raw[k] for k in sorted(raw, key=lambda k: int(k))]  # type: ignore[index]
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list):
        return None
    messages: list[dict[str, Any]] = []
    for item in raw:  # type: ignore[union-attr]
        if not isinstance(item, Mapping):
            return None
        message = item.get("message") if isinstance(item.get("message"), Mapping) else item  # a choice
        content = message.get("content")  # type: ignore[union-attr]
        if isinstance(content, list):  # text parts
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))  # type: ignore[union-attr]
        converted: dict[str, Any] = {"role": str(message.get("role") or "assistant"), "content": content or ""}  # type: ignore[union-attr]
        calls = _tool_calls(message.get("tool_calls"))  # type: ignore[union-attr]
        if calls:
            converted["tool_calls"] = calls
        if message.get("tool_call_id"):  # type: ignore[union-attr]
            converted["tool_call_id"] = message["tool_call_id"]  # type: ignore[index]
        messages.append(converted)
    return messages or None


def _ids(encoded: Any) -> list[int]:
    if isinstance(encoded, Mapping):  # BatchEncoding
        encoded = encoded["input_ids"]  # type: ignore[index]
    return [int(token) for token in encoded]


def _completion_ids(
    tokenizer: Any, prompt: list[dict[str, Any]], reply: dict[str, Any], prompt_ids: list[int]
) -> list[int]:
    """The tokens the chat template adds for the reply, up to and including the end-of-turn token."""
    full = _ids(tokenizer.apply_chat_template([*prompt, reply], tokenize=True, add_generation_prompt=False))
    eos = getattr(tokenizer, "eos_token_id", None)
    if full[: len(prompt_ids)] == prompt_ids:
        tail = full[len(prompt_ids) :]
        if eos in tail:
            tail = tail[: tail.index(eos) + 1]
        return tail
    # The template renders the history differently once a reply follows: encode the reply's text alone.
    ids = _ids(tokenizer.encode(reply.get("content") or "", add_special_tokens=False))
    return ids + [eos] if isinstance(eos, int) else ids


def _retokenized(triplet: Triplet, tokenizer: Any) -> Optional[Triplet]:
    prompt = chat_messages(triplet.prompt.get("raw_content") if isinstance(triplet.prompt, dict) else None)
    completion = chat_messages(triplet.response.get("raw_content") if isinstance(triplet.response, dict) else None)
    if not prompt or not completion:
        return None
    prompt_ids = _ids(tokenizer.apply_chat_template(prompt, tokenize=True, add_generation_prompt=True))
    reply = {**completion[0], "role": "assistant"}
    response_ids = _completion_ids(tokenizer, prompt, reply, prompt_ids)
    return triplet.model_copy(
        update={
            "prompt": {**triplet.prompt, "token_ids": prompt_ids},
            "response": {**triplet.response, "token_ids": response_ids},
            "metadata": {**triplet.metadata, TOKEN_IDS_SOURCE: RETOKENIZED},
        }
    )


def retokenize_triplets(triplets: Sequence[Triplet], tokenizer: Any) -> tuple[list[Triplet], int]:
    """Fill the token ids of triplets recorded without them; returns the triplets and how many were rebuilt.

    `tokenizer` is the policy's Hugging Face tokenizer (it needs a chat template). Triplets that have
    ids, or whose messages were not recorded, are returned unchanged.
    """
    result: list[Triplet] = []
    rebuilt = 0
    for triplet in triplets:
        has_ids = (
            isinstance(triplet.prompt, dict)
            and isinstance(triplet.response, dict)
            and bool(triplet.prompt.get("token_ids"))
            and bool(triplet.response.get("token_ids"))
        )
        retokenized = None if has_ids else _retokenized(triplet, tokenizer)
        if retokenized is None:
            result.append(triplet)
        else:
            result.append(retokenized)
            rebuilt += 1
    if rebuilt:
        logger.info("retokenized %d LLM call(s) recorded without token ids with the policy tokenizer", rebuilt)
    return result, rebuilt
