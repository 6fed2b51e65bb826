"""Fixtures for LLM proxy tests: loopback OpenAI backends, a thread-safe in-memory store, started proxies."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any, Callable, Optional

import pytest

from agentlightning.llm_proxy.models import ModelConfig
from agentlightning.llm_proxy.proxy import LLMProxy, set_active_llm_proxy
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import AttemptedRollout, Span
from tests.support.openai_server import OpenAITestServer


def call_spans(spans: Iterable[Span], name: str = "openai.chat.completion") -> list[Span]:
    """The call spans of successful proxied calls, after checking v0.3's shape: each has exactly one
    `raw_gen_ai_request` child with its sequence id, and the store holds nothing else."""
    spans = list(spans)
    calls = [s for s in spans if s.name == name]
    raws = [s for s in spans if s.name == "raw_gen_ai_request"]
    assert len(calls) + len(raws) == len(spans), [s.name for s in spans]
    assert sorted(r.parent_id or "" for r in raws) == sorted(c.span_id for c in calls)
    by_id = {c.span_id: c for c in calls}
    assert all(r.sequence_id == by_id[r.parent_id or ""].sequence_id for r in raws)
    return calls


def model_entry(name: str, server: OpenAITestServer, backend_model: Optional[str] = None) -> ModelConfig:
    """A model-list entry serving `name` from the loopback `server`."""
    return {
        "model_name": name,
        "litellm_params": {"model": f"hosted_vllm/{backend_model or server.model}", "api_base": server.base_url},
    }


@pytest.fixture
def store() -> InMemoryLightningStore:
    return InMemoryLightningStore(thread_safe=True)


@pytest.fixture
def backend() -> Iterator[OpenAITestServer]:
    with OpenAITestServer() as server:
        yield server


@pytest.fixture
async def attempt(store: InMemoryLightningStore) -> AttemptedRollout:
    return await store.start_rollout(input={"task": "test"})


@pytest.fixture
async def make_proxy(store: InMemoryLightningStore) -> AsyncIterator[Callable[..., Any]]:
    """`await make_proxy(model_list, **kwargs)`: a started thread-mode proxy writing to `store`, stopped after."""
    started: list[LLMProxy] = []

    async def make(model_list: list[ModelConfig], **kwargs: Any) -> LLMProxy:
        kwargs.setdefault("store", store)
        kwargs.setdefault("launch_mode", "thread")
        proxy = LLMProxy(model_list=model_list, **kwargs)
        await proxy.start()
        started.append(proxy)
        return proxy

    yield make
    for proxy in started:
        await proxy.stop()
    set_active_llm_proxy(None)


@pytest.fixture
async def proxy(make_proxy: Callable[..., Any], backend: OpenAITestServer) -> LLMProxy:
    """A started proxy serving `policy` from the loopback backend."""
    return await make_proxy([model_entry("policy", backend)])
