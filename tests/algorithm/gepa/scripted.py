"""A scripted reflection model and an agent whose reward depends on each task's keyword being in the prompt.

Each task names a keyword; the agent asks the (loopback) model the question with the prompt template,
scores 1.0 when the template mentions the task's keyword and 0.0 otherwise, and then notes (with
`agl.emit_message`) which keyword it missed. So each candidate is best on the tasks whose keywords it
holds: the Pareto front per validation example has several members. The scripted reflection model reads
gepa's reflection prompt, finds the current template and the agent's notes in it, and returns the
template with the first keyword it was told about added; tests can make it misbehave.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Optional

from openai import AsyncOpenAI

import agentlightning as agl
from agentlightning.types import LLM, PromptTemplate
from tests.support.openai_server import ErrorReply, ReplyLike

SEED_TEMPLATE = "Answer the question: {question}"
AGENT_MODEL = "agent-model"
REFLECTION_MODEL = "reflection-model"
KEYWORDS = ("alpha", "beta", "gamma")

_CURRENT = re.compile(r"```\n(?P<template>.*?)\n```", re.DOTALL)
_NOTE = re.compile(r"Note from the agent: the prompt must mention '(?P<keyword>\w+)'")


def tasks(keywords: tuple[str, ...], prefix: str) -> list[dict[str, Any]]:
    return [{"question": f"{prefix}{i}: what is {i} + {i}?", "keyword": kw} for i, kw in enumerate(keywords)]


@agl.rollout
async def keyword_agent(task: dict[str, Any], prompt_template: PromptTemplate, llm: LLM) -> float:
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="test-key", max_retries=0)
    await client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": prompt_template.format(question=task["question"])}]
    )
    if task["keyword"] in prompt_template.template:
        return 1.0
    agl.emit_message(f"the prompt must mention '{task['keyword']}'")
    return 0.0


class ScriptedReflection:
    """Responder of the loopback server: answers the agent and plays the reflection model.

    Args:
        fail_after: reflection calls answered normally before every later one gets HTTP `fail_status`.
        drop_placeholder: rewrite the template without its `{question}` placeholder (a broken proposal).
    """

    def __init__(self, fail_after: Optional[int] = None, fail_status: int = 401, drop_placeholder: bool = False):
        self.fail_after = fail_after
        self.fail_status = fail_status
        self.drop_placeholder = drop_placeholder
        self.reflection_prompts: list[str] = []
        self.agent_calls = 0
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> ReplyLike:
        text = "\n".join(str(m.get("content") or "") for m in request.get("messages") or [])
        if request.get("model") == AGENT_MODEL:
            with self._lock:
                self.agent_calls += 1
            return "The answer is 42."
        if request.get("model") != REFLECTION_MODEL:
            return ErrorReply(status_code=404, message=f"unknown model {request.get('model')}")
        with self._lock:
            if self.fail_after is not None and len(self.reflection_prompts) >= self.fail_after:
                return ErrorReply(status_code=self.fail_status, message="scripted reflection failure")
            self.reflection_prompts.append(text)
        current = _CURRENT.search(text)
        template = current.group("template") if current else SEED_TEMPLATE
        note = _NOTE.search(text)
        addition = f" Always mention {note.group('keyword')}." if note else " Be precise."
        if self.drop_placeholder:
            template = template.replace("{question}", "the question")
        return f"Here is the improved instruction:\n```\n{template}{addition}\n```"


def initial_resources(base_url: str) -> dict[str, Any]:
    return {
        "prompt": PromptTemplate(template=SEED_TEMPLATE, engine="f-string"),
        "llm": LLM(endpoint=base_url, model=AGENT_MODEL),
    }
