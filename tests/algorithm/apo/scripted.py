"""A scripted critic/editor behind the loopback OpenAI server, and an agent whose reward reads the prompt text.

The agent's reward is the fraction of `KEYWORDS` its prompt template contains. The critic (gradient
model) names one missing keyword, chosen by which meta-prompt variant asked, so branches differ; the
editor (edit model) appends that keyword to the template it was shown. Special critiques make the editor
misbehave on purpose: `DROP` removes the placeholder, `EMPTY` returns nothing.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import Any, Optional

from openai import AsyncOpenAI

import agentlightning as agl
from agentlightning.types import LLM, PromptTemplate
from tests.support.openai_server import ErrorReply, ReplyLike

KEYWORDS = ("step by step", "cite a source", "be concise")
SEED_TEMPLATE = "Answer the question: {question}"
AGENT_MODEL = "agent-model"
GRADIENT_MODEL = "gradient-model"
EDIT_MODEL = "edit-model"

_TEMPLATE_BLOCK = re.compile(r"<prompt_template>\n(?P<template>.*?)\n</prompt_template>", re.DOTALL)
_CRITIQUE_BLOCK = re.compile(r"<critique>\n(?P<critique>.*?)\n</critique>", re.DOTALL)
_KEYWORD = re.compile(r"add the phrase '(?P<keyword>[^']+)'")


def keyword_reward(template: str) -> float:
    lowered = template.lower()
    return sum(keyword in lowered for keyword in KEYWORDS) / len(KEYWORDS)


def _variant(text: str) -> int:
    if "Act as an experienced prompt engineer" in text:
        return 1
    if "Go through this checklist" in text:
        return 2
    return 0


def _user_text(request: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content") or "") for m in request.get("messages") or [])


class ScriptedLLM:
    """Responder for `OpenAITestServer`: answers the agent, the critic and the editor by model name.

    Args:
        critique_script: critiques handed out in order (repeating the last); None names a missing
            keyword. `DROP` / `EMPTY` in a critique make the editor drop the placeholder / reply empty.
        fail_first: number of critic calls answered with HTTP `fail_status` before behaving.
    """

    def __init__(
        self,
        critique_script: Optional[Sequence[str]] = None,
        fail_first: int = 0,
        fail_status: int = 500,
    ) -> None:
        self.critique_script = list(critique_script or [])
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.calls: dict[str, int] = {AGENT_MODEL: 0, GRADIENT_MODEL: 0, EDIT_MODEL: 0}
        self.gradient_requests: list[str] = []
        self.edit_requests: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> ReplyLike:
        model = str(request.get("model"))
        text = _user_text(request)
        with self._lock:
            self.calls[model] = self.calls.get(model, 0) + 1
            count = self.calls[model]
        if model == AGENT_MODEL:
            return "The answer is 42."
        if model == GRADIENT_MODEL:
            if count <= self.fail_first:
                return ErrorReply(status_code=self.fail_status, message="scripted critic failure")
            with self._lock:
                self.gradient_requests.append(text)
            return self._critique(text, count - self.fail_first)
        if model == EDIT_MODEL:
            with self._lock:
                self.edit_requests.append(text)
            return self._edit(text)
        return ErrorReply(status_code=404, message=f"unknown model {model}")

    def _critique(self, text: str, index: int) -> str:
        if self.critique_script:
            return self.critique_script[min(index, len(self.critique_script)) - 1]
        match = re.search(
            r"<prompt_template>\n(?P<t>.*?)\n</prompt_template>|\"\"\"\n(?P<q>.*?)\n\"\"\"", text, re.DOTALL
        )
        template = ""
        if match:
            template = match.group("t") or match.group("q") or ""
        elif "PROMPT TEMPLATE\n" in text:
            template = text.split("PROMPT TEMPLATE\n", 1)[1].split("\n\nGRADED RUNS", 1)[0]
        missing = [k for k in KEYWORDS if k not in template.lower()]
        if not missing:
            return "- The prompt already covers everything; add the phrase 'thank you'"
        keyword = missing[_variant(text) % len(missing)]
        return f"- Low rewards: the prompt should add the phrase '{keyword}'"

    def _edit(self, text: str) -> str:
        template_match = _TEMPLATE_BLOCK.search(text)
        critique_match = _CRITIQUE_BLOCK.search(text)
        template = template_match.group("template") if template_match else ""
        critique = critique_match.group("critique") if critique_match else ""
        if "EMPTY" in critique:
            return "   "
        if "DROP" in critique:
            return template.replace("{question}", "the question") + "\nAlso think harder."
        keyword = _KEYWORD.search(critique)
        addition = keyword.group("keyword") if keyword else "try again"
        return f"```\n{template}\nPlease {addition}.\n```"


@agl.rollout
async def keyword_agent(task: dict[str, Any], prompt_template: PromptTemplate, llm: LLM) -> float:
    """Calls the model once (so the trace has messages); the reward only depends on the prompt text."""
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="test-key", max_retries=0)
    await client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": prompt_template.format(question=task["question"])}]
    )
    if task.get("slow"):
        import asyncio

        await asyncio.sleep(60)
    return keyword_reward(prompt_template.template)


def questions(n: int, prefix: str = "q") -> Any:
    return [{"question": f"{prefix}{i}: what is {i} + {i}?"} for i in range(n)]
