"""The training page's token table reads what GRPO / RFT saved in the store: the latest report's steps."""

from __future__ import annotations

from typing import Any, Dict

import httpx

from agentlightning.algorithm.grpo.token_report import publish_token_report, token_report_resources_id
from agentlightning.dashboard.routes import dashboard_router
from agentlightning.store import InMemoryLightningStore, LightningStoreServer
from agentlightning.types import LLM, NamedResources

API = "/v1/agl"


def _step(step: int, generated: int) -> Dict[str, float]:
    return {
        "step": float(step),
        "tokens/generated": float(generated),
        "tokens/trained": float(generated - 2),
        "tokens/discarded/tied": 2.0,
        "staleness_0": 4.0,
    }


async def test_the_latest_saved_report_is_served_and_agents_keep_their_resources() -> None:
    store = InMemoryLightningStore()
    server = LightningStoreServer(store, port=0, routers=[dashboard_router()])
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.endpoint, timeout=30) as http:
            empty = (await http.get(API + "/analytics/tokens")).json()
            assert empty == {"algorithm": None, "updated": None, "steps": []}

            resources: NamedResources = {"main_llm": LLM(endpoint="http://127.0.0.1:1/v1", model="policy")}
            train = ("grpo-train", resources)
            await publish_token_report(store, "GRPO", [_step(1, 10)], train)
            await publish_token_report(store, "RFT", [_step(1, 7), _step(2, 9)], None)
            await publish_token_report(store, "GRPO", [_step(1, 10), _step(2, 12)], train)
            report: Any = (await http.get(API + "/analytics/tokens")).json()
    finally:
        await server.stop()
    assert report["algorithm"] == "grpo"
    assert [s["tokens/generated"] for s in report["steps"]] == [10.0, 12.0]
    assert report["steps"][1]["tokens/discarded/tied"] == 2.0 and report["steps"][1]["staleness_0"] == 4.0
    latest = await store.get_latest_resources()
    assert latest is not None and latest.resources_id == "grpo-train"
    assert token_report_resources_id("GRPO") == "grpo-tokens-state"
