"""Builds spans shaped exactly like the ones our instrumentation, AgentOps, LangChain tracers, LiteLLM and
the LLM proxy write, with a controllable clock and sequence ids."""

from __future__ import annotations

import json
from typing import Any, Optional

from agentlightning.emitter.reward import emit_reward
from agentlightning.instrumentation.openai import LLM_SPAN_NAME, request_to_attributes, response_to_attributes
from agentlightning.types import Attributes, Span


class SpanFactory:
    """Spans of one rollout attempt; times default to a clock advancing one second per span."""

    def __init__(self, rollout_id: str = "ro-1", attempt_id: str = "at-1", trace_id: str = "a" * 32) -> None:
        self.rollout_id = rollout_id
        self.attempt_id = attempt_id
        self.trace_id = trace_id
        self.clock = 100.0
        self.sequence = 0
        self._ids = 0

    def _next_id(self) -> str:
        self._ids += 1
        return f"{self._ids:016x}"

    def span(
        self,
        name: str,
        attributes: Optional[Attributes] = None,
        *,
        parent: Optional[Span | str] = None,
        start: Optional[float] = None,
        end: Optional[float] = None,
        sequence_id: Optional[int] = None,
        span_id: Optional[str] = None,
    ) -> Span:
        if start is None:
            start = self.clock
        if end is None:
            end = start + 1.0
        self.clock = max(self.clock, end) + 0.01
        if sequence_id is None:
            self.sequence += 1
            sequence_id = self.sequence
        parent_id = parent.span_id if isinstance(parent, Span) else parent
        return Span.from_attributes(
            attributes=attributes or {},
            rollout_id=self.rollout_id,
            attempt_id=self.attempt_id,
            sequence_id=sequence_id,
            trace_id=self.trace_id,
            span_id=span_id or self._next_id(),
            parent_id=parent_id,
            start_time=start,
            end_time=end,
            name=name,
        )

    # ---- shapes ----

    def agent(self, name: str, **kwargs: Any) -> Span:
        return self.span(f"agent.{name}", {"agent.name": name}, **kwargs)

    def openai_call(
        self,
        messages: list[dict[str, Any]],
        reply: str | None = "ok",
        *,
        response_id: Optional[str] = "chatcmpl-1",
        prompt_ids: Optional[list[int]] = None,
        response_ids: Optional[list[int]] = None,
        tool_calls: Optional[list[dict[str, Any]]] = None,
        tools: Optional[list[dict[str, Any]]] = None,
        logprobs: Optional[list[dict[str, Any]]] = None,
        model: str = "test-model",
        name: str = LLM_SPAN_NAME,
        **kwargs: Any,
    ) -> Span:
        """A chat completion span exactly as `agentlightning.instrumentation.openai` records it."""
        request: dict[str, Any] = {"model": model, "messages": messages, "temperature": 0.5}
        if tools:
            request["tools"] = tools
        message: dict[str, Any] = {"role": "assistant", "content": reply}
        if tool_calls:
            message["tool_calls"] = tool_calls
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": "stop"}
        if response_ids is not None:
            choice["token_ids"] = response_ids
        if logprobs is not None:
            choice["logprobs"] = {"content": logprobs}
        response: dict[str, Any] = {
            "id": response_id,
            "model": model,
            "choices": [choice],
            "usage": {"prompt_tokens": len(prompt_ids or []), "completion_tokens": len(response_ids or [])},
        }
        if prompt_ids is not None:
            response["prompt_token_ids"] = prompt_ids
        attributes = {**request_to_attributes(request), **response_to_attributes(response)}
        return self.span(name, attributes, **kwargs)

    def reward(self, value: float, **kwargs: Any) -> Span:
        """A reward span as `emit_reward` writes it."""
        core = emit_reward(value, propagate=False)
        return self.span(core.name, dict(core.attributes), **kwargs)

    def agentops_langchain_chat(self, messages: list[dict[str, Any]], completions: list[str], **kwargs: Any) -> Span:
        """AgentOps' LangChain callback handler chat-model span (JSON, not flattened)."""
        attributes: Attributes = {
            "agentops.span.kind": "llm",
            "agentops.operation.name": "chat_model",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.prompt": json.dumps([{"content": m["content"], "role": m["role"]} for m in messages]),
            "gen_ai.completion": json.dumps(completions),
        }
        return self.span("chat_model.llm", attributes, **kwargs)

    def openllmetry_langchain_chat(self, messages: list[dict[str, Any]], reply: str, **kwargs: Any) -> Span:
        """OpenLLMetry's LangChain instrumentation chat span (`<Class>.chat`, flattened prompts)."""
        attributes: Attributes = {"llm.request.type": "chat", "gen_ai.system": "openai"}
        for i, message in enumerate(messages):
            attributes[f"gen_ai.prompt.{i}.role"] = message["role"]
            attributes[f"gen_ai.prompt.{i}.content"] = message["content"]
        attributes["gen_ai.completion.0.role"] = "assistant"
        attributes["gen_ai.completion.0.content"] = reply
        return self.span(kwargs.pop("name", "ChatOpenAI.chat"), attributes, **kwargs)

    def openinference_chat(self, messages: list[dict[str, Any]], reply: str, **kwargs: Any) -> Span:
        """OpenInference's LangChain span: named after the runnable, `llm.input_messages.*`."""
        attributes: Attributes = {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini"}
        for i, message in enumerate(messages):
            attributes[f"llm.input_messages.{i}.message.role"] = message["role"]
            attributes[f"llm.input_messages.{i}.message.content"] = message["content"]
        attributes["llm.output_messages.0.message.role"] = "assistant"
        attributes["llm.output_messages.0.message.content"] = reply
        return self.span(kwargs.pop("name", "ChatOpenAI"), attributes, **kwargs)

    def litellm_call(
        self,
        messages: list[dict[str, Any]],
        reply: str,
        *,
        prompt_ids: list[int],
        response_ids: list[int],
        response_id: str,
        sequence_id: Optional[int] = None,
        start: Optional[float] = None,
        parent: Optional[Span | str] = None,
        literal_choices: bool = True,
    ) -> tuple[Span, Span]:
        """LiteLLM's OpenTelemetry callback pair: `litellm_request` (gen_ai.*) and its `raw_gen_ai_request`
        child (raw `llm.hosted_vllm.*` provider fields stored as string literals)."""
        outer_attributes: Attributes = {"gen_ai.request.model": "hosted_vllm/qwen", "gen_ai.response.id": response_id}
        for i, message in enumerate(messages):
            outer_attributes[f"gen_ai.prompt.{i}.role"] = message["role"]
            outer_attributes[f"gen_ai.prompt.{i}.content"] = message["content"]
        outer_attributes["gen_ai.completion.0.role"] = "assistant"
        outer_attributes["gen_ai.completion.0.content"] = reply
        if sequence_id is None:
            self.sequence += 1
            sequence_id = self.sequence
        start = self.clock if start is None else start
        outer = self.span(
            "litellm_request", outer_attributes, sequence_id=sequence_id, start=start, end=start + 2, parent=parent
        )
        raw_attributes: Attributes = {"llm.hosted_vllm.messages": str(messages)}
        choice = {"finish_reason": "stop", "index": 0, "message": {"content": reply, "role": "assistant"}}
        if literal_choices:
            raw_attributes["llm.hosted_vllm.prompt_token_ids"] = str(prompt_ids)
            raw_attributes["llm.hosted_vllm.choices"] = str([{**choice, "token_ids": response_ids}])
        else:
            raw_attributes["llm.hosted_vllm.prompt_token_ids"] = prompt_ids
            raw_attributes["llm.hosted_vllm.response_token_ids"] = json.dumps([response_ids])
        raw = self.span(
            "raw_gen_ai_request",
            raw_attributes,
            parent=outer,
            sequence_id=sequence_id,
            start=start + 0.5,
            end=start + 1.5,
        )
        return outer, raw


def assert_accounted(report: Any) -> None:
    """Every LLM-looking span is either a triplet anchor or listed with a reason (no silent drops)."""
    assert report.n_llm_spans == report.n_triplets + len(report.dropped), report
