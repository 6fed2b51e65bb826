"""Servers shared by the matrix's cells: one policy server per chat-template family (a scripted model that
records what it sampled), one LLM proxy over all four, one gateway per family, all on a store of the module.

The model samples "Paris" letter by letter (`sampled_ids`), not as the tokenizer would encode it: whatever
re-tokenizes a reply's text then gets other ids, and the matrix sees it.

The proxy and the gateways run on an event loop of their own (a thread), so every test's loop can come and
go while they keep serving.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Coroutine, Dict, List, Tuple, TypeVar

import pytest

pytest.importorskip("torch", reason="needs the train extra")
pytest.importorskip("anthropic", reason="needs the anthropic extra")

import agentlightning as agl  # noqa: E402
from agentlightning.gateway import Gateway, GatewayConfig  # noqa: E402
from agentlightning.llm_proxy import LLMProxy  # noqa: E402
from agentlightning.serving.server import PolicyServer  # noqa: E402
from tests.support.chat_templates import (  # noqa: E402
    FAMILIES,
    answer_reply,
    family_tokenizer,
    sampled_ids,
    tool_call_reply,
)
from tests.support.policy_capture import PromptScriptedLM  # noqa: E402

from .conversations import ANSWER, TOOL_RESULT  # noqa: E402

T = TypeVar("T")


@dataclass
class FamilyPolicy:
    """A family's policy server and the model behind it (`model.calls`: what it was prompted and sampled)."""

    family: str
    server: PolicyServer
    model: PromptScriptedLM

    @property
    def tokenizer(self) -> Any:
        return self.model.tokenizer

    def served_since(self, start: int) -> List[Tuple[List[int], List[int]]]:
        """(prompt ids, reply ids + end-of-turn) of each call since `start` calls: the ids the policy sampled."""
        eos = int(self.tokenizer.eos_token_id)
        return [(prompt, reply + [eos]) for prompt, reply in self.model.calls[start:]]


def _chooser(family: str) -> Any:
    """The model's reply to a prompt: the answer once the tool's result is in it, a tool call if tools are."""

    def choose(prompt: str) -> str:
        if TOOL_RESULT in prompt:
            return answer_reply(family, ANSWER)
        if "get_weather" in prompt:
            return tool_call_reply(family, "get_weather", {"city": "Paris"})
        return answer_reply(family, ANSWER)

    return choose


class BackgroundLoop:
    """An event loop on a daemon thread, for servers that outlive each test's loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="fidelity-servers", daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


@pytest.fixture(scope="module")
def policies() -> Iterator[Dict[str, FamilyPolicy]]:
    started: Dict[str, FamilyPolicy] = {}
    try:
        for family in FAMILIES:
            tokenizer = family_tokenizer(family)
            model = PromptScriptedLM(tokenizer, _chooser(family), lambda text, t=tokenizer: sampled_ids(t, text))
            server = PolicyServer(model, tokenizer, model_name="policy", deterministic=True, default_max_tokens=256)
            server.start()
            started[family] = FamilyPolicy(family, server, model)
        yield started
    finally:
        for policy in started.values():
            policy.server.stop()


@pytest.fixture(scope="module")
def store() -> agl.InMemoryLightningStore:
    return agl.InMemoryLightningStore(thread_safe=True)


@pytest.fixture(scope="module")
def background() -> Iterator[BackgroundLoop]:
    loop = BackgroundLoop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def proxy(
    policies: Dict[str, FamilyPolicy], store: agl.InMemoryLightningStore, background: BackgroundLoop
) -> Iterator[LLMProxy]:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    entries = [
        {
            "model_name": f"policy-{family}",
            "litellm_params": {"model": "hosted_vllm/policy", "api_base": p.server.endpoint},
        }
        for family, p in policies.items()
    ]
    running = LLMProxy(model_list=entries, store=store, launch_mode="thread")  # type: ignore[arg-type]
    background.run(running.start())
    yield running
    background.run(running.stop())


@pytest.fixture(scope="module")
def gateways(
    policies: Dict[str, FamilyPolicy], store: agl.InMemoryLightningStore, background: BackgroundLoop
) -> Iterator[Dict[str, Gateway]]:
    started: Dict[str, Gateway] = {}
    try:
        for family, policy in policies.items():
            gateway = Gateway(store, GatewayConfig(upstreams=(policy.server.endpoint,), num_retries=0), secret="s")
            background.run(gateway.start())
            started[family] = gateway
        yield started
    finally:
        for gateway in started.values():
            background.run(gateway.stop())
