"""agentlightning: train any AI agent with reinforcement learning and automatic prompt optimization.

The public names are listed once, in `__all__`; each resolves on first use from the module that holds it, so
`import agentlightning` stays fast and never imports optional extras. `tests/test_public_api.py` holds the
list against the subpackages' own `__all__` and against the API reference (docs/reference/api.md).
"""

# The names of `__all__` are module attributes only through `__getattr__`, which pyright cannot see.
# pyright: reportUnsupportedDunderAll=false

from __future__ import annotations

import importlib
from typing import Any, Dict, List

__version__ = "0.3.0"

# fmt: off
__all__ = [
    "__version__",
    # agentlightning.adapter
    "Adapter", "TraceAdapter", "OtelTraceAdapter", "TraceToTripletBase", "TracerTraceToTriplet",
    "LlmProxyTraceToTriplet", "TraceToMessages", "AdaptationReport", "TurnTokens", "TrajectoryRow",
    "ContinuityBreak", "merge_turns", "triplet_tokens",
    # agentlightning.algorithm
    "Algorithm", "algo", "FastAlgorithm", "Baseline", "Schedule", "TrainedPolicy", "APO", "GEPA", "VERL",
    "GRPO", "RFT",
    # agentlightning.config
    "lightning_cli",
    # agentlightning.emitter
    "reward", "operation", "emit_reward", "get_reward_value", "get_rewards_from_span", "is_reward_span",
    "find_reward_spans", "find_final_reward", "emit_message", "emit_object", "emit_exception",
    "emit_annotation", "get_message_value", "get_object_value", "reward_within", "RewardTimeoutError",
    # agentlightning.env_var
    "LightningEnvVar", "resolve_bool_env_var", "resolve_int_env_var", "resolve_str_env_var",
    # agentlightning.execution
    "ExecutionStrategy", "ClientServerExecutionStrategy", "SharedMemoryExecutionStrategy",
    "RayExecutionStrategy", "ExecutionEvent", "ThreadingEvent", "MultiprocessingEvent", "RunError",
    "RolloutsFailedError",
    # agentlightning.litagent
    "LitAgent", "ProcessAgent", "ProcessAgentError", "llm_rollout", "prompt_rollout", "rollout",
    # agentlightning.llm_proxy
    "LLMProxy",
    # agentlightning.runner
    "Runner", "LitAgentRunner", "LegacyAgentRunner", "Hook",
    # agentlightning.store
    "UNSET", "Unset", "LightningStore", "LightningStoreCapabilities", "LightningStoreStatistics",
    "CollectionBasedLightningStore", "InMemoryLightningStore", "LightningStoreThreaded",
    "LightningStoreServer", "LightningStoreClient", "SqliteLightningStore", "PostgresLightningStore",
    # agentlightning.tracer
    "AgentOpsTracer", "Tracer", "OtelTracer", "DummyTracer", "get_active_tracer", "set_active_tracer",
    "clear_active_tracer",
    # agentlightning.trainer
    "Trainer", "build_component",
    # agentlightning.types
    "Triplet", "RolloutLegacy", "Task", "TaskInput", "TaskIfAny", "RolloutRawResultLegacy",
    "RolloutRawResult", "RolloutMode", "GenericResponse", "ParallelWorkerBase", "Dataset", "AttemptStatus",
    "RolloutStatus", "RolloutConfig", "Rollout", "Attempt", "AttemptedRollout", "FinishedAttempt",
    "EnqueueRolloutRequest", "Worker", "WorkerStatus", "PaginatedResult", "FilterOptions", "SortOptions",
    "FilterField", "ROLLOUT_STATUSES", "ATTEMPT_STATUSES", "ROLLOUT_MODES", "WORKER_STATUSES",
    "TERMINAL_ROLLOUT_STATUSES", "QUEUING_ROLLOUT_STATUSES", "DEFAULT_TIMEOUT_SECONDS",
    "DEFAULT_UNRESPONSIVE_SECONDS", "Resource", "LLM", "ProxyLLM", "PromptTemplate", "AlgorithmState",
    "ResourceUnion", "NamedResources", "ResourcesUpdate", "validate_named_resources", "AUTO_SEQUENCE_ID",
    "AttributeValue", "Attributes", "TraceState", "SpanContext", "TraceStatus", "Event", "Link",
    "OtelResource", "Span", "SpanNames", "SpanAttributeNames", "SpanLike", "StatusCode", "SpanCoreFields",
    "SpanRecordingContext",
    # agentlightning.client
    "AgentLightningClient", "DevTaskLoader",
    # agentlightning.server
    "AgentLightningServer",
    # agentlightning.logging
    "configure_logger", "setup_logging", "setup_module_logging",
    # agentlightning.trainer.summary
    "FitSummary",
    # agentlightning.algorithm.grpo.config
    "GRPOConfig",
    # agentlightning.algorithm.rft.config
    "RFTConfig",
    # agentlightning.serving.echo
    "EchoServer",
]
# fmt: on

# Subpackages whose `__all__` names are public here (SPEC section 1), searched in this order.
_SUBPACKAGES: List[str] = [
    "adapter",
    "algorithm",
    "config",
    "emitter",
    "env_var",
    "execution",
    "litagent",
    "llm_proxy",
    "runner",
    "store",
    "tracer",
    "trainer",
    "types",
]

# Public names that no subpackage lists: their module, and the name there when it differs.
_EXPLICIT: Dict[str, str] = {
    "AgentLightningClient": "client",
    "DevTaskLoader": "client",
    "AgentLightningServer": "server",
    "configure_logger": "logging",
    "setup_logging": "logging:setup",
    "setup_module_logging": "logging:setup_module",
    "FitSummary": "trainer.summary",
    "GRPOConfig": "algorithm.grpo.config",
    "RFTConfig": "algorithm.rft.config",
    "EchoServer": "serving.echo",
}

_index: Dict[str, str] | None = None


def _build_index() -> Dict[str, str]:
    """Public name -> the subpackage that lists it (importing every subpackage once)."""
    index: Dict[str, str] = {}
    for module_name in _SUBPACKAGES:
        try:
            module = importlib.import_module(f"{__name__}.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith(f"{__name__}.{module_name}"):
                continue
            raise
        for name in getattr(module, "__all__", ()):
            index.setdefault(name, module_name)
    return index


def __getattr__(name: str) -> Any:
    global _index
    if name in _EXPLICIT:
        module_name, _, attr = _EXPLICIT[name].partition(":")
        return getattr(importlib.import_module(f"{__name__}.{module_name}"), attr or name)
    if name in __all__:
        if _index is None:
            _index = _build_index()
        if name in _index:
            return getattr(importlib.import_module(f"{__name__}.{_index[name]}"), name)
    raise AttributeError(f"module 'agentlightning' has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))
