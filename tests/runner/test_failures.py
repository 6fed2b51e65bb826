"""A failing agent: the run's first failure logs its traceback, later ones one line each, naming the URL of
a failed HTTP request."""

from __future__ import annotations

import logging
import urllib.error
from typing import Any

import aiohttp
import httpx2  # the HTTP client openai is built on
import openai
import pytest
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

import agentlightning as agl
from agentlightning.runner.failures import (
    FAILURE_SUMMARY_ATTRIBUTE,
    describe_failure,
    log_failure,
    share_first_traceback,
)
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.otel import OtelTracer
from agentlightning.types import NamedResources, Rollout


def _openai_404() -> openai.NotFoundError:
    request = httpx2.Request("POST", "http://127.0.0.1:9/v1/nope/chat/completions")
    response = httpx2.Response(404, request=request, json={"detail": "Not Found"})
    return openai.NotFoundError("Error code: 404", response=response, body=None)


def test_an_openai_status_error_names_the_request_it_made() -> None:
    assert describe_failure(_openai_404()) == (
        "NotFoundError: Error code: 404 (POST http://127.0.0.1:9/v1/nope/chat/completions)"
    )


def test_http_errors_of_other_clients_name_their_url() -> None:
    info = aiohttp.RequestInfo(URL("http://h:1/x"), "GET", CIMultiDictProxy(CIMultiDict()), URL("http://h:1/x"))
    aio = aiohttp.ClientResponseError(info, (), status=503, message="Service Unavailable")
    assert describe_failure(aio).count("http://h:1/x") == 1  # its message has the URL already: not added twice
    urllib_error = urllib.error.HTTPError("http://h:2/y", 404, "Not Found", {}, None)  # type: ignore[arg-type]
    assert describe_failure(urllib_error) == "HTTPError: HTTP Error 404: Not Found (http://h:2/y)"
    try:
        raise RuntimeError("agent gave up") from _openai_404()
    except RuntimeError as wrapped:
        assert describe_failure(wrapped).endswith("(POST http://127.0.0.1:9/v1/nope/chat/completions)")


def test_plain_errors_are_type_and_first_line_and_stay_short() -> None:
    assert describe_failure(ValueError("bad\nsecond line")) == "ValueError: bad"
    assert describe_failure(KeyError("k")) == "KeyError: 'k'"
    assert describe_failure(RuntimeError()) == "RuntimeError"
    assert len(describe_failure(ValueError("x" * 5000))) < 320


def test_only_the_first_failure_of_a_run_logs_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("agentlightning.test_failures")
    share_first_traceback()
    with caplog.at_level(logging.ERROR, logger=logger.name):
        for i in range(3):
            try:
                raise ValueError(f"boom {i}")
            except ValueError as exc:
                log_failure(logger, f"ro-{i}", "Worker-0", exc)
    assert [r.exc_info is not None for r in caplog.records] == [True, False, False]
    assert caplog.records[1].getMessage() == "rollout ro-1 failed: ValueError: boom 1"
    share_first_traceback()  # a new run shows its first traceback again
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger=logger.name):
        log_failure(logger, "ro-9", "Worker-0", ValueError("again"))
    assert caplog.records[0].exc_info is not None


class FailingAgent(agl.LitAgent[int]):
    async def rollout_async(self, task: int, resources: NamedResources, rollout: Rollout) -> float:
        raise ZeroDivisionError(f"task {task}")


async def test_the_failed_attempt_stores_an_error_span_with_the_one_line_summary() -> None:
    store = InMemoryLightningStore()
    runner: Any = agl.LitAgentRunner(tracer=OtelTracer(), poll_interval=0.05, heartbeat_interval=0)
    with runner.run_context(agent=FailingAgent(), store=store):
        with pytest.raises(ZeroDivisionError):
            await runner.step(7)
    (rollout,) = await store.query_rollouts()
    assert rollout.status == "failed"
    (span,) = [s for s in await store.query_spans(rollout.rollout_id) if s.name == "agentlightning.exception"]
    assert span.status.status_code == "ERROR"
    assert span.attributes[FAILURE_SUMMARY_ATTRIBUTE] == "ZeroDivisionError: task 7"
    assert span.status.description == "ZeroDivisionError: task 7"
