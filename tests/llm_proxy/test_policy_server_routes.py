"""A Claude-Code-style client and the OpenAI Responses client against our policy server, through the proxy.

The policy server (`agentlightning.serving`) speaks chat completions only; the proxy translates and the
recorded spans carry the policy's exact prompt and response token ids.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

pytest.importorskip("torch", reason="needs the train extra")
anthropic = pytest.importorskip("anthropic", reason="needs the anthropic extra")

from agentlightning.serving.chat import render_chat_prompt  # noqa: E402
from agentlightning.serving.server import PolicyServer  # noqa: E402
from agentlightning.store.memory import InMemoryLightningStore  # noqa: E402
from agentlightning.types import AttemptedRollout  # noqa: E402
from tests.support.tiny_model import tiny_model  # noqa: E402

pytestmark = [pytest.mark.train, pytest.mark.slow]


@pytest.fixture
def policy() -> Iterator[PolicyServer]:
    model, tokenizer = tiny_model(seed=0)
    with PolicyServer(model, tokenizer, model_name="tiny", seed=0, default_max_tokens=8) as running:
        yield running


async def test_messages_and_responses_routes_record_the_policys_token_ids(
    make_proxy: Any, store: InMemoryLightningStore, attempt: AttemptedRollout, policy: PolicyServer
) -> None:
    entry = {"model_name": "policy", "litellm_params": {"model": "hosted_vllm/tiny", "api_base": policy.endpoint}}
    proxy = await make_proxy([entry])
    base = f"{proxy.endpoint}/rollout/{attempt.rollout_id}/attempt/{attempt.attempt.attempt_id}"
    claude = anthropic.AsyncAnthropic(base_url=base, api_key="k", max_retries=0)
    async with claude.messages.stream(
        model="policy", max_tokens=6, messages=[{"role": "user", "content": "hello"}]
    ) as stream:
        streamed = await stream.get_final_message()
    oai = openai.AsyncOpenAI(base_url=base + "/v1", api_key="k", max_retries=0)
    response = await oai.responses.create(model="policy", input="hello", max_output_tokens=6)
    await claude.close()
    await oai.close()
    assert streamed.role == "assistant" and response.status in ("completed", "incomplete")
    spans = [s for s in await store.query_spans(attempt.rollout_id) if s.name == "openai.chat.completion"]
    assert len(spans) == 2
    expected_prompt = render_chat_prompt(policy.engine.tokenizer, [{"role": "user", "content": "hello"}])
    for span in spans:
        assert list(span.attributes["prompt_token_ids"]) == expected_prompt  # type: ignore[arg-type]
        assert 1 <= len(span.attributes["response_token_ids"]) <= 6  # type: ignore[arg-type]
    assert response.model_extra is not None
    assert response.model_extra["token_ids"] == list(spans[1].attributes["response_token_ids"])  # type: ignore[arg-type]
