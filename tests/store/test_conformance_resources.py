"""Conformance: versioned resources, on every backend."""

from __future__ import annotations

import re

from agentlightning.store import LightningStore
from agentlightning.types import LLM, PromptTemplate, ProxyLLM

from .backends import FakeClock


async def test_no_resources_yet(store: LightningStore) -> None:
    assert await store.get_latest_resources() is None
    assert await store.get_resources_by_id("rs-000000000000") is None
    assert (await store.query_resources()).total == 0


async def test_add_resources_always_creates_a_new_latest_version(store: LightningStore, clock: FakeClock) -> None:
    first = await store.add_resources({"llm": LLM(endpoint="http://localhost:1/v1", model="m")})
    assert re.fullmatch(r"rs-[0-9a-f]{12}", first.resources_id)
    assert first.version == 1
    assert first.create_time == first.update_time == clock.now
    clock.advance(1)
    second = await store.add_resources({"llm": LLM(endpoint="http://localhost:2/v1", model="m")})
    assert second.resources_id != first.resources_id and second.version == 1
    latest = await store.get_latest_resources()
    assert latest is not None and latest.resources_id == second.resources_id
    assert await store.get_resources_by_id(first.resources_id) == first


async def test_update_resources_upserts_and_bumps_version(store: LightningStore, clock: FakeClock) -> None:
    created = await store.update_resources("default", {"prompt": PromptTemplate(template="v1 {x}")})
    assert created.resources_id == "default" and created.version == 1
    other = await store.add_resources({"prompt": PromptTemplate(template="other")})
    clock.advance(5)
    updated = await store.update_resources("default", {"prompt": PromptTemplate(template="v2 {x}")})
    assert updated.version == 2
    assert updated.create_time == created.create_time
    assert updated.update_time == clock.now
    prompt = updated.resources["prompt"]
    assert isinstance(prompt, PromptTemplate) and prompt.template == "v2 {x}"
    latest = await store.get_latest_resources()
    assert latest is not None and latest.resources_id == "default" and latest.version == 2
    assert (await store.get_resources_by_id(other.resources_id)) == other


async def test_resource_kinds_round_trip(store: LightningStore) -> None:
    resources = {
        "llm": LLM(endpoint="http://127.0.0.1:8000/v1", model="qwen", api_key="k", sampling_parameters={"t": 0.7}),
        "proxy": ProxyLLM(endpoint="http://127.0.0.1:9000/v1", model="qwen"),
        "prompt": PromptTemplate(template="Hello {name}", engine="f-string"),
    }
    stored = await store.add_resources(resources)  # type: ignore[arg-type]
    fetched = await store.get_resources_by_id(stored.resources_id)
    assert fetched is not None
    assert isinstance(fetched.resources["llm"], LLM) and fetched.resources["llm"].sampling_parameters == {"t": 0.7}
    assert isinstance(fetched.resources["proxy"], ProxyLLM)
    assert (
        fetched.resources["proxy"].get_base_url("ro-1", "at-1") == "http://127.0.0.1:9000/rollout/ro-1/attempt/at-1/v1"
    )
    prompt = fetched.resources["prompt"]
    assert isinstance(prompt, PromptTemplate) and prompt.format(name="x") == "Hello x"


async def test_resources_given_as_plain_dicts(store: LightningStore) -> None:
    stored = await store.add_resources(
        {"p": {"resource_type": "prompt_template", "template": "t", "engine": "jinja"}}  # type: ignore[dict-item]
    )
    prompt = stored.resources["p"]
    assert isinstance(prompt, PromptTemplate) and prompt.engine == "jinja"


async def test_query_resources(store: LightningStore, clock: FakeClock) -> None:
    a = await store.update_resources("alpha", {"p": PromptTemplate(template="a")})
    clock.advance(1)
    b = await store.update_resources("beta", {"p": PromptTemplate(template="b")})
    clock.advance(1)
    await store.update_resources("alpha", {"p": PromptTemplate(template="a2")})
    everything = await store.query_resources()
    assert [r.resources_id for r in everything] == ["alpha", "beta"]
    assert everything.total == 2
    assert [r.resources_id for r in await store.query_resources(resources_id="beta")] == ["beta"]
    assert [r.resources_id for r in await store.query_resources(resources_id_contains="ph")] == ["alpha"]
    by_update = await store.query_resources(sort_by="update_time", sort_order="desc")
    assert [r.resources_id for r in by_update] == ["alpha", "beta"]
    by_version = await store.query_resources(sort_by="version")
    assert [(r.resources_id, r.version) for r in by_version] == [("beta", 1), ("alpha", 2)]
    page = await store.query_resources(sort_by="create_time", limit=1, offset=1)
    assert [r.resources_id for r in page] == [b.resources_id] and page.total == 2
    assert a.resources_id == "alpha"
