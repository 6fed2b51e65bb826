"""AgentOps may instrument the OpenAI client again mid-run; agent-lightning's wrapper must stay on top."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from agentlightning.instrumentation.openai import is_openai_wrapper
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.base import clear_active_tracer
from tests.support.network import block_external_network
from tests.support.openai_server import OpenAITestServer

pytestmark = pytest.mark.agentops

agentops_instrumentation = pytest.importorskip(
    "agentops.instrumentation", reason="needs the agentops extra: pip install agentlightning[agentops]"
)

from agentlightning.tracer.agentops import AgentOpsTracer  # noqa: E402


@pytest.fixture
def agentops_tracer(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[AgentOpsTracer, InMemoryLightningStore]]:
    block_external_network(monkeypatch)
    store = InMemoryLightningStore()
    tracer = AgentOpsTracer()
    tracer.init_worker(0, store)
    yield tracer, store
    tracer.teardown_worker(0)
    clear_active_tracer()


async def test_lazy_agentops_reinstrumentation_leaves_our_wrapper_outermost(
    agentops_tracer: tuple[AgentOpsTracer, InMemoryLightningStore],
) -> None:
    from openai.resources.chat.completions import Completions

    tracer, store = agentops_tracer
    with OpenAITestServer(lambda request: json.dumps({"ok": True}), always_return_token_ids=True) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test")
        attempted = await store.start_rollout(input="q")
        async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
            # What AgentOps' import hook does when an import looks like an agent framework and then openai
            # is imported again: it drops its provider instrumentations and wraps `create` anew.
            agentops_instrumentation._uninstrument_providers()
            agentops_instrumentation._perform_instrumentation("openai")
            assert is_openai_wrapper(Completions.__dict__["create"])
            # AgentOps' own wrapper cannot read the `openai.omit` arguments `.stream()` passes; ours shields it.
            kwargs: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            with client.chat.completions.stream(**kwargs) as stream:
                final = stream.get_final_completion()
        assert final.choices[0].message.content == '{"ok": true}'
    llm_spans = [s for s in await store.query_spans(attempted.rollout_id) if s.name == "openai.chat.completion"]
    assert len(llm_spans) == 1
    assert llm_spans[0].attributes["response_token_ids"] == server.responses[0]["choices"][0]["token_ids"]
