"""How runners report failed rollouts: the first traceback of a run in full, then one line per failure.

A failing agent usually fails the same way on every task; a traceback per rollout buries the one that
matters. `describe_failure` gives the one line (with the URL of a failed HTTP request, which many
client errors leave out), and the runner stores it on the rollout's exception span, so the run's
summary and the dashboard can count and show failures by error.
"""

from __future__ import annotations

import logging
import multiprocessing
from typing import Any, Optional

from agentlightning.semconv import AGL_EXCEPTION_SUMMARY

__all__ = [
    "FAILURE_SUMMARY_ATTRIBUTE",
    "describe_failure",
    "timeout_location",
    "log_failure",
    "share_first_traceback",
]

FAILURE_SUMMARY_ATTRIBUTE = AGL_EXCEPTION_SUMMARY
"""Attribute of a failed attempt's `agentlightning.exception` span: the one-line `describe_failure` text."""

_MAX_LINE = 300

# One flag per run, shared with the runner processes forked after `share_first_traceback()`; in other
# processes (spawned, Ray actors) each process prints its own first traceback.
_shared_flag: Optional[Any] = None
_shown_here = False


def share_first_traceback() -> None:
    """Start a run: the next failure prints its traceback, in this process or any runner forked from it."""
    global _shared_flag, _shown_here
    _shown_here = False
    if _shared_flag is None:
        _shared_flag = multiprocessing.Value("b", 0)
    else:
        _shared_flag.value = 0


def _claim_first() -> bool:
    global _shown_here
    flag = _shared_flag
    if flag is None:
        first, _shown_here = not _shown_here, True
        return first
    with flag.get_lock():
        if flag.value:
            return False
        flag.value = 1
        return True


def _request_of(exc: BaseException) -> Optional[str]:
    """`METHOD URL` of the HTTP request behind `exc` (httpx/openai, requests, aiohttp, urllib), if any."""
    for owner in (exc, getattr(exc, "response", None)):
        try:
            request = getattr(owner, "request", None)  # httpx raises RuntimeError when no request is set
        except RuntimeError:
            request = None
        url = getattr(request, "url", None)
        if url:
            method = getattr(request, "method", None)
            return f"{method} {url}" if method else str(url)
    info = getattr(exc, "request_info", None)  # aiohttp.ClientResponseError
    if info is not None and getattr(info, "url", None):
        return f"{info.method} {info.url}"
    url = getattr(exc, "url", None)  # urllib.error.HTTPError
    return url if isinstance(url, str) and url.startswith(("http://", "https://")) else None


def describe_failure(exc: BaseException) -> str:
    """`Type: first line of the message`, plus `(METHOD URL)` when the error came from an HTTP request."""
    lines = str(exc).strip().splitlines()
    message = lines[0] if lines else ""
    if len(message) > _MAX_LINE:
        message = message[: _MAX_LINE - 3] + "..."
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    cause: Optional[BaseException] = exc
    for _ in range(3):  # the request is often on the error a client library wrapped
        if cause is None:
            break
        request = _request_of(cause)
        if request is not None:
            url = request.split(" ", 1)[-1]
            return text if url in text else f"{text} ({request})"
        cause = cause.__cause__ or cause.__context__
    return text


# HTTP client timeouts (openai/httpx, aiohttp, requests): in an agent, almost always a model call.
_HTTP_TIMEOUTS = frozenset(
    {"APITimeoutError", "TimeoutException", "ReadTimeout", "ConnectTimeout", "WriteTimeout", "PoolTimeout"}
    | {"ServerTimeoutError", "Timeout"}
)


def timeout_location(exc: BaseException) -> Optional[str]:
    """Where a failure timed out (`semconv.TIMEOUT_LOCATIONS`), or None when it is no timeout.

    An error naming its own location (`timeout_location`: `RewardTimeoutError` -> "reward", a
    `ProcessAgentError` that ran out of time -> "rollout") wins; an HTTP client timeout is "llm_call";
    another `TimeoutError` is "agent". The causes of wrapped errors are searched too.
    """
    generic: Optional[str] = None
    cause: Optional[BaseException] = exc
    for _ in range(5):
        if cause is None:
            break
        named = getattr(cause, "timeout_location", None)
        if isinstance(named, str) and named:
            return named
        if {kind.__name__ for kind in type(cause).__mro__} & _HTTP_TIMEOUTS:
            return "llm_call"
        if isinstance(cause, TimeoutError) and generic is None:
            generic = "agent"
        cause = cause.__cause__ or cause.__context__
    return generic


def log_failure(logger: logging.Logger, rollout_id: str, where: str, exc: BaseException) -> str:
    """Log one failed rollout: with its traceback if it is the run's first failure, else as one line."""
    line = describe_failure(exc)
    if _claim_first():
        logger.error(
            "rollout %s failed (%s): %s\nIts traceback follows; later failures get one line each and the summary "
            "counts them by error.",
            rollout_id,
            where,
            line,
            exc_info=exc,
        )
    else:
        logger.error("rollout %s failed: %s", rollout_id, line)
    return line
