"""Textual gradients: a critique of a prompt from graded runs, then an edit that applies the critique."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from .evaluation import RolloutResult
from .llm import RetryPolicy, chat_text
from .placeholders import template_placeholders
from .prompts import MetaPrompt

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from agentlightning.types import PromptTemplate

__all__ = [
    "Experiment",
    "experiments_from_results",
    "transcript",
    "placeholder_list",
    "Critique",
    "write_critique",
    "apply_edit",
    "clean_edit_reply",
    "strip_thinking",
]

MAX_CONTENT_CHARS = 2000
"""Longer message contents are shortened in transcripts, keeping meta-prompts within model context limits."""

_FENCE = re.compile(r"^```[\w-]*\s*\n(?P<body>.*?)\n?```$", re.DOTALL)
# Local reasoning models (e.g. served by llama.cpp or vLLM) may put their thinking before the answer.
_THINKING = re.compile(r"^\s*<(think|thinking|reasoning)>.*?</\1>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Experiment:
    """One graded run as the gradient meta-prompt sees it."""

    index: int
    task: str
    status: str
    reward: Optional[float]
    messages: list[dict[str, Any]]
    transcript: str

    @property
    def reward_text(self) -> str:
        return "none (counted as 0)" if self.reward is None else f"{self.reward:.3f}"


def _shorten(text: str) -> str:
    if len(text) <= MAX_CONTENT_CHARS:
        return text
    return text[:MAX_CONTENT_CHARS] + f" ... [{len(text) - MAX_CONTENT_CHARS} more characters]"


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(part.get("text", "[" + str(part.get("type")) + "]")) for part in content if isinstance(part, dict)
        )  # type: ignore[union-attr]
    return json.dumps(content, default=str)


def _message_line(message: dict[str, Any]) -> str:
    role = str(message.get("role", "?"))
    parts = [_content_text(message.get("content"))]
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        parts.append(f"(calls {function.get('name')}({function.get('arguments')}))")
    text = " ".join(part for part in parts if part)
    return f"[{role}] {_shorten(text)}"


def _is_prefix(shorter: list[dict[str, Any]], longer: list[dict[str, Any]]) -> bool:
    if len(shorter) > len(longer):
        return False
    key = lambda m: (m.get("role"), _content_text(m.get("content")))  # noqa: E731
    return all(key(a) == key(b) for a, b in zip(shorter, longer, strict=False))


def transcript(conversations: Sequence[Any]) -> str:
    """The runs' chat messages as text; a call whose messages a later call repeats is shown once."""
    conversation_messages: list[list[dict[str, Any]]] = [list(c.get("messages") or []) for c in conversations]
    kept = [
        messages
        for i, messages in enumerate(conversation_messages)
        if not any(_is_prefix(messages, later) for later in conversation_messages[i + 1 :])
    ]
    if not kept:
        return "(no LLM messages were recorded for this run)"
    blocks = ["\n".join(_message_line(m) for m in messages) for messages in kept]
    return "\n...\n".join(blocks)


def _task_text(task: Any) -> str:
    if isinstance(task, str):
        return _shorten(task)
    try:
        return _shorten(json.dumps(task, default=str, ensure_ascii=False))
    except (TypeError, ValueError):
        return _shorten(repr(task))


def experiments_from_results(results: Sequence[RolloutResult]) -> list[Experiment]:
    """Number the runs from 1 and render their transcripts."""
    experiments: list[Experiment] = []
    for index, result in enumerate(results, start=1):
        messages = [m for conversation in result.messages for m in conversation.get("messages") or []]
        experiments.append(
            Experiment(
                index=index,
                task=_task_text(result.task),
                status=result.status,
                reward=result.reward,
                messages=messages,
                transcript=transcript(result.messages),
            )
        )
    return experiments


def placeholder_list(prompt: PromptTemplate) -> list[str]:
    """Placeholders of a template written the way its engine writes them, e.g. `["{question}"]`."""
    try:
        names = template_placeholders(prompt.template, prompt.engine)
    except ValueError:
        return []
    if not names:
        return []
    if prompt.engine == "jinja":
        return ["{{ " + name + " }}" for name in sorted(names)]
    return ["{" + name + "}" for name in sorted(names)]


def strip_thinking(reply: str) -> str:
    """The reply without a leading `<think>...</think>` block, stripped of surrounding whitespace."""
    return _THINKING.sub("", reply, count=1).strip()


def clean_edit_reply(reply: str) -> str:
    """The prompt text of an edit reply: thinking, surrounding whitespace and a wrapping code fence removed."""
    text = strip_thinking(reply)
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group("body").strip()
    for tag in ("prompt_template", "prompt"):
        if text.startswith(f"<{tag}>") and text.endswith(f"</{tag}>"):
            text = text[len(tag) + 2 : -(len(tag) + 3)].strip()
    return text


@dataclass(frozen=True)
class Critique:
    """A critique, and which meta-prompt and runs produced it."""

    text: str
    meta_prompt: str
    rollout_ids: list[str]


async def write_critique(
    client: AsyncOpenAI,
    *,
    model: str,
    temperature: Optional[float],
    prompt: PromptTemplate,
    results: Sequence[RolloutResult],
    sample_size: int,
    meta_prompts: Sequence[MetaPrompt],
    rng: random.Random,
    retry: RetryPolicy,
) -> Critique:
    """Critique `prompt` from up to `sample_size` of the graded runs, with a randomly chosen meta-prompt."""
    sampled = list(results) if len(results) <= sample_size else rng.sample(list(results), sample_size)
    meta_prompt = rng.choice(list(meta_prompts))
    text = meta_prompt.render(
        prompt_template=prompt.template,
        placeholders=placeholder_list(prompt),
        engine=prompt.engine,
        experiments=experiments_from_results(sampled),
    )
    reply = await chat_text(
        client,
        model=model,
        messages=[{"role": "user", "content": text}],
        temperature=temperature,
        retry=retry,
        purpose="critique (textual gradient)",
    )
    return Critique(
        text=strip_thinking(reply), meta_prompt=meta_prompt.name, rollout_ids=[r.rollout_id for r in sampled]
    )


async def apply_edit(
    client: AsyncOpenAI,
    *,
    model: str,
    prompt: PromptTemplate,
    critique: str,
    meta_prompts: Sequence[MetaPrompt],
    rng: random.Random,
    retry: RetryPolicy,
) -> tuple[str, str]:
    """Ask `model` to rewrite `prompt` following `critique`; returns (cleaned new template, meta-prompt name)."""
    meta_prompt = rng.choice(list(meta_prompts))
    text = meta_prompt.render(
        prompt_template=prompt.template,
        placeholders=placeholder_list(prompt),
        engine=prompt.engine,
        critique=critique,
    )
    reply = await chat_text(
        client,
        model=model,
        messages=[{"role": "user", "content": text}],
        retry=retry,
        purpose="prompt edit",
    )
    return clean_edit_reply(reply), meta_prompt.name
