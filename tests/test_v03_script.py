"""A v0.3 user's script, written against the reference's documented API only, runs unchanged.

It imports through the reference's module paths (`store.client_server`, `store.collection_based`,
`types.Hook`, ...), trains with `Trainer.fit` on the shared-memory strategy, then reads the results over
HTTP with the reference's server/client pair. It runs in a fresh interpreter, as a user's script would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

V03_SCRIPT = """
import asyncio

import agentlightning as agl
from agentlightning.store.client_server import LightningStoreClient, LightningStoreServer
from agentlightning.store.collection_based import CollectionBasedLightningStore
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.store.utils import scan_unhealthy_rollouts
from agentlightning.types import Hook, PaginatedResult

ends = []


class Recorder(Hook):
    async def on_rollout_end(self, *, agent, runner, rollout, spans):
        ends.append((rollout.input, len(spans)))


@agl.rollout
def agent(task, prompt_template):
    agl.emit_message(prompt_template.format(x=task))
    return float(task)


store = InMemoryLightningStore()
assert isinstance(store, CollectionBasedLightningStore)
trainer = agl.Trainer(
    algorithm=agl.Baseline(polling_interval=0.05),
    strategy="shm",
    store=store,
    hooks=[Recorder()],
    initial_resources={"prompt": agl.PromptTemplate(template="Q: {x}", engine="f-string")},
)
trainer.fit(agent, train_dataset=[1, 2, 3])
assert sorted(i for i, _ in ends) == [1, 2, 3], ends


async def over_http():
    server = LightningStoreServer(store, host="127.0.0.1", port=0)
    await server.start()
    client = LightningStoreClient(server.endpoint)
    try:
        page = await client.query_rollouts(status_in=["succeeded"], limit=0)
        assert isinstance(page, PaginatedResult) and list(page) == [] and page.total == 3
        rewards = []
        for rollout in await client.query_rollouts():
            spans = await client.query_spans(rollout.rollout_id)
            rewards.append(agl.find_final_reward(spans))
        await scan_unhealthy_rollouts(client)
        return sorted(rewards)
    finally:
        await client.close()
        await server.stop()


print("REWARDS", asyncio.run(over_http()))
"""


@pytest.mark.slow
def test_a_v03_script_runs_unchanged(tmp_path: Path) -> None:
    script = tmp_path / "v03_script.py"
    script.write_text(V03_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "REWARDS [1.0, 2.0, 3.0]" in result.stdout
