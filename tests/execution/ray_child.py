"""A training process for the Ctrl+C test: joins a Ray cluster, prints its runner actors, then waits.

python -m tests.execution.ray_child RAY_ADDRESS NAMESPACE
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import agentlightning as agl
from agentlightning.execution.ray_strategy import RayExecutionStrategy
from agentlightning.store.memory import InMemoryLightningStore


class IdleAgent(agl.LitAgent[Any]):
    def rollout(self, task: Any, resources: agl.NamedResources, rollout: agl.Rollout) -> float:
        return 1.0


def main() -> None:
    address, namespace = sys.argv[1], sys.argv[2]
    strategy = RayExecutionStrategy(n_runners=2, address=address, namespace=namespace, graceful_timeout=5.0)

    @agl.algo
    async def wait_forever(*, store: agl.LightningStore) -> None:
        import ray

        def locate() -> list[dict[str, Any]]:
            return [ray.get(info.handle.where.remote(), timeout=60) for info in strategy.actors]

        locations = await asyncio.to_thread(locate)
        names = [info.name for info in strategy.actors]
        print(json.dumps({"names": names, "pids": [loc["pid"] for loc in locations]}), flush=True)
        while True:
            await asyncio.sleep(0.1)

    trainer = agl.Trainer(
        algorithm=wait_forever,
        store=InMemoryLightningStore(thread_safe=True),
        strategy=strategy,
        tracer=agl.OtelTracer(),
    )
    trainer.fit(IdleAgent())


if __name__ == "__main__":
    main()
