"""Fixtures for LLM proxy tests: loopback OpenAI backends, a thread-safe in-memory store, started proxies."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, Callable, Optional

import pytest

from agentlightning.llm_proxy.models import ModelConfig
from agentlightning.llm_proxy.proxy import LLMProxy, set_active_llm_proxy
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import AttemptedRollout
from tests.support.openai_server import OpenAITestServer


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
