"""Chat-completion calls for APO's critiques and edits, retried with exponential backoff.

Only plain chat completions are used (model, messages, optional temperature), so any OpenAI-compatible
server works: OpenAI, Azure, vLLM, llama.cpp, or agentlightning's own serving module.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from opentelemetry import context as otel_context

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["RetryPolicy", "LLMCallError", "ChatReply", "chat_text", "chat_completion", "is_retryable"]

logger = logging.getLogger(__name__)

# The key OpenTelemetry instrumentations (ours included) check before recording a span: APO's own calls
# must never show up inside an agent's rollout trace.
_SUPPRESS_INSTRUMENTATION_KEY: Any = getattr(otel_context, "_SUPPRESS_INSTRUMENTATION_KEY", "suppress_instrumentation")

_RETRYABLE_STATUS = {408, 409, 425, 429}


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a failed LLM call is retried.

    Delay before retry `n` (1-based) is `min(max_delay, base_delay * 2 ** (n - 1))`, times a random
    factor in `[1 - jitter, 1]`.
    """

    max_retries: int = 4
    base_delay: float = 1.0
    max_delay: float = 30.0
    jitter: float = 0.25

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError(f"retry delays must be >= 0, got base={self.base_delay}, max={self.max_delay}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must lie in [0, 1], got {self.jitter}")

    def delay(self, retry: int, rng: Optional[random.Random] = None) -> float:
        raw = min(self.max_delay, self.base_delay * (2 ** (retry - 1)))
        factor = 1.0 - self.jitter * (rng or random).random()
        return raw * factor


class LLMCallError(RuntimeError):
    """An LLM call that still failed after every retry (or failed in a way retrying cannot fix).

    `fatal` marks configuration errors (bad key, no permission, unknown model) that no later call
    will get past, so the caller should stop instead of skipping this one call.
    """

    def __init__(self, message: str, *, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


def _is_fatal(exc: BaseException) -> bool:
    import openai

    return isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError))


def is_retryable(exc: BaseException) -> bool:
    """Transport errors, timeouts, rate limits and 5xx are worth retrying; other 4xx are not."""
    import openai

    if isinstance(exc, (openai.APIConnectionError, openai.APITimeoutError)):
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code >= 500 or exc.status_code in _RETRYABLE_STATUS
    return isinstance(exc, (asyncio.TimeoutError, ConnectionError))


@dataclass(frozen=True)
class ChatReply:
    """The assistant text and the token usage the server reported (None when it reported none)."""

    text: str
    input_tokens: Optional[int]
    output_tokens: Optional[int]


def _reply_usage(response: Any) -> tuple[Optional[int], Optional[int]]:
    usage = getattr(response, "usage", None)
    prompt, completion = getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)
    if isinstance(prompt, int) and isinstance(completion, int):
        return prompt, completion
    return None, None


def _reply_text(response: Any) -> str:
    choices = getattr(response, "choices", None) or []
    if not choices:
        return ""
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # some servers return content parts
        return "".join(str(getattr(part, "text", "") or "") for part in content)
    return ""


async def chat_text(
    client: AsyncOpenAI,
    *,
    model: str,
    messages: list[dict[str, Any]],
    temperature: Optional[float] = None,
    retry: RetryPolicy = RetryPolicy(),
    purpose: str = "LLM call",
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rng: Optional[random.Random] = None,
) -> str:
    """Send one chat completion and return the assistant text, retrying transient failures.

    Raises LLMCallError when retries run out or the error is not retryable (e.g. 401 or an unknown model).
    """
    reply = await chat_completion(
        client,
        model=model,
        messages=messages,
        temperature=temperature,
        retry=retry,
        purpose=purpose,
        sleep=sleep,
        rng=rng,
    )
    return reply.text


async def chat_completion(
    client: AsyncOpenAI,
    *,
    model: str,
    messages: list[dict[str, Any]],
    temperature: Optional[float] = None,
    retry: RetryPolicy = RetryPolicy(),
    purpose: str = "LLM call",
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rng: Optional[random.Random] = None,
) -> ChatReply:
    """`chat_text`, with the token usage the server reported."""
    kwargs: dict[str, Any] = {"model": model, "messages": messages}
    if temperature is not None:
        kwargs["temperature"] = temperature
    attempt = 0
    while True:
        attempt += 1
        token = otel_context.attach(otel_context.set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            response = await client.chat.completions.create(**kwargs)
            return ChatReply(_reply_text(response), *_reply_usage(response))
        except Exception as exc:
            failure: Exception = exc
        finally:
            otel_context.detach(token)
        retryable = is_retryable(failure)
        if not retryable or attempt > retry.max_retries:
            why = "not retryable" if not retryable else f"gave up after {attempt} attempts"
            raise LLMCallError(
                f"{purpose} with model {model!r} failed ({why}): {type(failure).__name__}: {failure}",
                fatal=_is_fatal(failure),
            ) from failure
        delay = retry.delay(attempt, rng)
        logger.warning(
            "%s with model %r failed (%s: %s); retry %d/%d in %.1f s",
            purpose,
            model,
            type(failure).__name__,
            failure,
            attempt,
            retry.max_retries,
            delay,
        )
        await sleep(delay)
