"""The gateway works over every store backend it can share a process with (threads): calls and events land
as spans with token ids and rewards, whatever the backend."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from agentlightning.emitter import find_final_reward
from agentlightning.gateway import Gateway, GatewayConfig
from tests.store.backends import BACKENDS, FakeClock
from tests.support.openai_server import OpenAITestServer

from .conftest import post

NAMES = [name for name in ("threaded", "http", "sqlite", "postgres") if name in BACKENDS]


@pytest.mark.parametrize("name", [pytest.param(n, marks=BACKENDS[n].marks) for n in NAMES])
async def test_calls_and_events_over_each_backend(tmp_path: Path, backend: OpenAITestServer, name: str) -> None:
    async with BACKENDS[name].factory(tmp_path, FakeClock()) as store:
        attempted = await store.start_rollout(input={"backend": name}, mode="train")
        rollout_id, attempt_id = attempted.rollout_id, attempted.attempt.attempt_id
        gateway = Gateway(store, GatewayConfig(upstreams=(backend.base_url,)), secret="s")
        await gateway.start()
        try:
            key = gateway.key(rollout_id, attempt_id)
            client = openai.AsyncOpenAI(
                base_url=gateway.openai_base_url(rollout_id, attempt_id, "train"), api_key=key, max_retries=0
            )
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"hi {name}"}])
            reward = await post(
                gateway.event_url(rollout_id, attempt_id),
                headers={"Authorization": f"Bearer {key}"},
                json={"event_type": "reward", "data": {"value": 0.5}},
            )
            assert reward.status_code == 201, reward.text
        finally:
            await gateway.stop()
        spans = list(await store.query_spans(rollout_id))
        assert [s.name for s in spans] == ["openai.chat.completion", "agentlightning.annotation"]
        assert [s.sequence_id for s in spans] == [1, 2]
        assert spans[0].attributes["prompt_token_ids"] == backend.responses[-1]["prompt_token_ids"]
        assert find_final_reward(spans) == 0.5
