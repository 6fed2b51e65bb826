"""Fixtures for APO tests: the loopback OpenAI server with a scripted critic/editor, and APO/Trainer builders."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openai import AsyncOpenAI

import agentlightning as agl
from agentlightning.algorithm.apo import APO, RetryPolicy
from agentlightning.tracer.otel import OtelTracer
from agentlightning.types import LLM, PromptTemplate
from tests.support.openai_server import OpenAITestServer

from .scripted import AGENT_MODEL, EDIT_MODEL, GRADIENT_MODEL, SEED_TEMPLATE, ScriptedLLM

FAST_RETRY = RetryPolicy(max_retries=3, base_delay=0.01, max_delay=0.05)


@pytest.fixture
def scripted_llm() -> ScriptedLLM:
    return ScriptedLLM()


@pytest.fixture
def server(scripted_llm: ScriptedLLM) -> Iterator[OpenAITestServer]:
    with OpenAITestServer(scripted_llm) as running:
        yield running


def make_apo(server: OpenAITestServer, **overrides: Any) -> APO:
    """A small, quiet APO talking to the loopback server (the client itself never retries)."""
    options: dict[str, Any] = {
        "gradient_model": GRADIENT_MODEL,
        "apply_edit_model": EDIT_MODEL,
        "beam_width": 2,
        "branch_factor": 2,
        "beam_rounds": 2,
        "gradient_batch_size": 2,
        "val_batch_size": 3,
        "seed": 7,
        "llm_retry": FAST_RETRY,
        "show_progress": False,
    }
    options.update(overrides)
    client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
    return APO(client, **options)


def initial_resources(server: OpenAITestServer, template: str = SEED_TEMPLATE) -> dict[str, Any]:
    return {
        "prompt": PromptTemplate(template=template, engine="f-string"),
        "llm": LLM(endpoint=server.base_url, model=AGENT_MODEL),
    }


def make_trainer(apo: APO, server: OpenAITestServer, n_runners: int = 2, **overrides: Any) -> agl.Trainer:
    options: dict[str, Any] = {
        "algorithm": apo,
        "strategy": {"type": "shm", "main_thread": "algorithm", "n_runners": n_runners, "graceful_delay": 0.5},
        "tracer": OtelTracer(),
        "runner": {"poll_interval": 0.05, "heartbeat_interval": 60.0},
        "adapter": agl.TraceToMessages(),
        "initial_resources": initial_resources(server),
    }
    options.update(overrides)
    return agl.Trainer(**options)
