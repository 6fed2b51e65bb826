"""Short names accepted wherever the trainer takes a component spec (e.g. `strategy="shm"`)."""

from __future__ import annotations

__all__ = ["ExecutionStrategyRegistry", "TracerRegistry", "StoreRegistry"]

ExecutionStrategyRegistry: dict[str, str] = {
    "shm": "agentlightning.execution.shared_memory.SharedMemoryExecutionStrategy",
    "shared_memory": "agentlightning.execution.shared_memory.SharedMemoryExecutionStrategy",
    "cs": "agentlightning.execution.client_server.ClientServerExecutionStrategy",
    "client_server": "agentlightning.execution.client_server.ClientServerExecutionStrategy",
    "ray": "agentlightning.execution.ray_strategy.RayExecutionStrategy",
}

TracerRegistry: dict[str, str] = {
    "otel": "agentlightning.tracer.otel.OtelTracer",
    "agentops": "agentlightning.tracer.agentops.AgentOpsTracer",
    "dummy": "agentlightning.tracer.dummy.DummyTracer",
    "weave": "agentlightning.tracer.weave.WeaveTracer",
}

StoreRegistry: dict[str, str] = {
    "memory": "agentlightning.store.memory.InMemoryLightningStore",
    "sqlite": "agentlightning.store.sqlite.SqliteLightningStore",
    "postgres": "agentlightning.store.postgres.PostgresLightningStore",
    "client": "agentlightning.store_http.client.LightningStoreClient",
}
