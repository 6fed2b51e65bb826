"""The reflection model GEPA proposes new prompts with, and the budgets that stop the search.

`ReflectionModel` is the callable gepa calls (`prompt -> text`) from its worker thread; the chat completion
itself runs on the algorithm's event loop through the same OpenAI client code as APO (retries, no tracing
of its own calls). It counts the tokens the server reports (an estimate of 4 characters per token when it
reports none) and, given prices, the dollars. `Budget` is the stop condition gepa checks between
iterations: rollouts run, reflection tokens, dollars, iterations; a fatal error of the reflection model
(bad key, unknown model) stops the search too.
"""

from __future__ import annotations

import logging
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from ..apo.llm import LLMCallError, RetryPolicy, chat_completion
from .bridge import LoopBridge

if TYPE_CHECKING:
    from gepa.core.state import GEPAState
    from openai import AsyncOpenAI

__all__ = ["ReflectionModel", "ReflectionUsage", "Budget"]

logger = logging.getLogger(__name__)

_CHARS_PER_TOKEN = 4


@dataclass
class ReflectionUsage:
    """What the reflection model has cost so far (restored on resume, so budgets span restarts)."""

    calls: int = 0
    failed_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    estimated_tokens: int = 0
    """Tokens estimated from text length because the server reported no usage."""
    dollars: float = 0.0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(eq=False)
class ReflectionModel:
    """gepa's `LanguageModel`: one chat completion per call, on `bridge`'s loop, with usage and cost accounting.

    Args:
        client: `openai.AsyncOpenAI` of any OpenAI-compatible server.
        model: the reflection model's name.
        bridge: carries the calls from gepa's thread to the algorithm's event loop.
        temperature: sampling temperature (None: the server's default).
        price_per_million_input_tokens / price_per_million_output_tokens: dollars, for `usage.dollars`.
        retry: how transient failures are retried (None: `RetryPolicy()`).
    """

    client: AsyncOpenAI
    model: str
    bridge: LoopBridge
    _: KW_ONLY
    temperature: Optional[float] = None
    price_per_million_input_tokens: Optional[float] = None
    price_per_million_output_tokens: Optional[float] = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    usage: ReflectionUsage = field(default_factory=ReflectionUsage, init=False)
    fatal_error: Optional[LLMCallError] = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.retry = self.retry or RetryPolicy()  # callers may pass retry=None for the default

    @property
    def total_cost(self) -> float:
        """Dollars spent (gepa reads this name); 0 without prices."""
        return self.usage.dollars

    def __call__(self, prompt: str | list[dict[str, Any]]) -> str:
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        return self.bridge.call(self._complete(messages))

    async def _complete(self, messages: list[dict[str, Any]]) -> str:
        self.usage.calls += 1
        try:
            reply = await chat_completion(
                self.client,
                model=self.model,
                messages=messages,
                temperature=self.temperature,
                retry=self.retry,
                purpose="GEPA reflection",
            )
        except LLMCallError as exc:
            self.usage.failed_calls += 1
            if exc.fatal and self.fatal_error is None:
                self.fatal_error = exc
            raise
        input_tokens, output_tokens = reply.input_tokens, reply.output_tokens
        if input_tokens is None or output_tokens is None:
            input_tokens = sum(len(str(m.get("content") or "")) for m in messages) // _CHARS_PER_TOKEN
            output_tokens = len(reply.text) // _CHARS_PER_TOKEN
            self.usage.estimated_tokens += input_tokens + output_tokens
        self.usage.input_tokens += input_tokens
        self.usage.output_tokens += output_tokens
        self.usage.dollars += (
            input_tokens * (self.price_per_million_input_tokens or 0.0)
            + output_tokens * (self.price_per_million_output_tokens or 0.0)
        ) / 1e6
        return reply.text


@dataclass(eq=False)
class Budget:
    """gepa's stop condition: true once a limit is reached (checked between iterations); `reason` says which."""

    reflection: ReflectionModel
    _: KW_ONLY
    max_rollouts: Optional[int] = None
    max_reflection_tokens: Optional[int] = None
    max_reflection_dollars: Optional[float] = None
    max_iterations: Optional[int] = None
    reason: Optional[str] = field(default=None, init=False)

    def __call__(self, gepa_state: GEPAState) -> bool:
        self.reason = self.exhausted(gepa_state.total_num_evals, gepa_state.i + 1)
        return self.reason is not None

    def exhausted(self, rollouts: int, iterations: int) -> Optional[str]:
        usage = self.reflection.usage
        if self.reflection.fatal_error is not None:
            return f"the reflection model failed: {self.reflection.fatal_error}"
        if self.max_rollouts is not None and rollouts >= self.max_rollouts:
            return f"rollouts: {rollouts} of {self.max_rollouts}"
        if self.max_reflection_tokens is not None and usage.tokens >= self.max_reflection_tokens:
            return f"reflection tokens: {usage.tokens} of {self.max_reflection_tokens}"
        if self.max_reflection_dollars is not None and usage.dollars >= self.max_reflection_dollars:
            return f"reflection dollars: {usage.dollars:.4f} of {self.max_reflection_dollars}"
        if self.max_iterations is not None and iterations >= self.max_iterations:
            return f"iterations: {iterations} of {self.max_iterations}"
        return None
