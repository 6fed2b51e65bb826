"""A sampler session's calls recorded as LLM spans in a store, read back by `agl export`'s row builder."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Iterator

import pytest
import tinker
from tinker import types

from agentlightning.export.rows import rows_from_store
from agentlightning.store.sqlite import SqliteLightningStore
from agentlightning.tinker import TinkerConfig, TinkerServer

from .conftest import API_KEY


@pytest.fixture
def recorded(
    tiny_model_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[TinkerServer, str]]:
    database = str(tmp_path / "store.sqlite")
    config = TinkerConfig(
        models={tiny_model_path: tiny_model_path}, checkpoint_dir=str(tmp_path / "ck"), api_keys=(API_KEY,)
    )
    with TinkerServer(config, SqliteLightningStore(database)) as server:
        monkeypatch.setenv("TINKER_BASE_URL", server.base_url)
        monkeypatch.setenv("TINKER_API_KEY", API_KEY)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
        yield server, database


def test_sampling_session_calls_become_spans(recorded: tuple[TinkerServer, str], tiny_model_path: str) -> None:
    server, database = recorded
    with tinker.ServiceClient() as service_client:
        sampler = service_client.create_sampling_client(base_model=tiny_model_path)
        tokenizer = sampler.get_tokenizer()
        prompts = ["hello world", "the quick brown fox"]
        for text in prompts:
            sampler.sample(
                types.ModelInput.from_ints(tokenizer.encode(text)), 2, types.SamplingParams(max_tokens=6, seed=1)
            ).result()
    rollouts = server.service.recorder.rollout_ids() if server.service.recorder else {}
    assert len(rollouts) == 1

    async def read() -> list[dict]:
        store = SqliteLightningStore(database)
        try:
            spans = await store.query_spans(next(iter(rollouts.values())), "latest")
            assert [span.name for span in spans] == ["openai.chat.completion"] * 2
            assert spans[0].attributes["gen_ai.response.system_fingerprint"] == "weights-v0"
            return await rows_from_store(store)
        finally:
            await store.close()

    rows = asyncio.run(read())
    # Export makes a row of each call (the prompts do not extend each other): the prompt token ids exactly as
    # sent through the Tinker API, the completion with the sampled tokens' logprobs.
    assert sorted(row["prompt_ids"] for row in rows) == sorted(tokenizer.encode(text) for text in prompts)
    for row in rows:
        assert row["completion_ids"] and len(row["completion_logprobs"]) == len(row["completion_ids"])
