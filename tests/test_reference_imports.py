"""Every module path the v0.3 reference documents (SPEC.md and the seed documents) imports here.

The modules are imported in a fresh interpreter, so a path that only works because another test imported
something first still fails.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Module paths and the names v0.3 code imports from them.
REFERENCE_MODULES: list[tuple[str, tuple[str, ...]]] = [
    ("agentlightning", ("LitAgent", "Trainer", "LightningStore", "DevTaskLoader", "Hook", "__version__")),
    ("agentlightning.adapter", ("TraceToTripletBase", "TracerTraceToTriplet", "LlmProxyTraceToTriplet")),
    ("agentlightning.adapter.triplet", ("TraceTree", "RewardMatchPolicy")),
    ("agentlightning.algorithm", ("Algorithm", "algo", "FastAlgorithm", "Baseline", "APO")),
    ("agentlightning.algorithm.decorator", ("FunctionalAlgorithm",)),
    ("agentlightning.algorithm.utils", ("with_store", "with_llm_proxy", "batch_iter_over_dataset")),
    ("agentlightning.cli", ()),
    ("agentlightning.config", ("lightning_cli",)),
    ("agentlightning.emitter", ("emit_reward", "get_reward_value", "find_final_reward", "emit_annotation")),
    ("agentlightning.env_var", ("LightningEnvVar",)),
    ("agentlightning.execution", ("SharedMemoryExecutionStrategy", "ClientServerExecutionStrategy")),
    ("agentlightning.execution.client_server", ("ClientServerExecutionStrategy",)),
    ("agentlightning.execution.shared_memory", ("SharedMemoryExecutionStrategy",)),
    ("agentlightning.instrumentation", ("instrument_all", "uninstrument_all", "VLLM_INSTALLED")),
    ("agentlightning.instrumentation.agentops", ()),
    ("agentlightning.instrumentation.vllm", ("instrument_vllm", "uninstrument_vllm")),
    ("agentlightning.instrumentation.weave", ("InMemoryWeaveTraceServer", "instrument_weave", "uninstrument_weave")),
    ("agentlightning.litagent", ("LitAgent", "rollout", "llm_rollout", "prompt_rollout")),
    ("agentlightning.litagent.decorator", ("FunctionalLitAgent",)),
    ("agentlightning.llm_proxy", ("LLMProxy", "LightningSpanExporter", "StreamConversionMiddleware")),
    ("agentlightning.reward", ()),
    ("agentlightning.runner", ("Runner", "LitAgentRunner", "LegacyAgentRunner", "Hook")),
    ("agentlightning.semconv", ("AGL_ANNOTATION", "LightningSpanAttributes")),
    ("agentlightning.store", ("LightningStoreClient", "LightningStoreServer", "CollectionBasedLightningStore")),
    ("agentlightning.store.base", ("UNSET", "Unset", "LightningStore")),
    ("agentlightning.store.client_server", ("LightningStoreServer", "LightningStoreClient")),
    ("agentlightning.store.collection", ("CollectionBasedLightningStore", "LightningCollections")),
    ("agentlightning.store.collection_based", ("CollectionBasedLightningStore",)),
    ("agentlightning.store.memory", ("InMemoryLightningStore", "estimate_model_size")),
    ("agentlightning.store.threading", ("LightningStoreThreaded",)),
    ("agentlightning.store.utils", ("rollout_status_from_attempt", "scan_unhealthy_rollouts", "LATENCY_BUCKETS")),
    ("agentlightning.tracer", ("AgentOpsTracer", "OtelTracer", "DummyTracer", "set_active_tracer")),
    ("agentlightning.tracer.agentops", ("LightningSpanProcessor",)),
    ("agentlightning.tracer.otel", ("LightningSpanProcessor",)),
    ("agentlightning.tracer.weave", ("WeaveTracer",)),
    ("agentlightning.trainer", ("Trainer", "build_component")),
    ("agentlightning.trainer.init_utils", ()),
    ("agentlightning.types", ("Triplet", "Rollout", "Span", "PaginatedResult")),
    ("agentlightning.types.core", ("Triplet", "Rollout", "Attempt", "Worker", "PaginatedResult")),
    ("agentlightning.types.resources", ("LLM", "ProxyLLM", "PromptTemplate", "NamedResources")),
    ("agentlightning.types.tracer", ("Span", "SpanNames", "SpanCoreFields")),
    ("agentlightning.utils.id", ()),
    ("agentlightning.utils.metrics", ("ConsoleMetricsBackend",)),
    ("agentlightning.utils.otel", ("make_link_attributes", "make_tag_attributes", "get_tracer_provider")),
    ("agentlightning.utils.otlp", ()),
    ("agentlightning.utils.server_launcher", ("PythonServerLauncher", "PythonServerLauncherArgs")),
    ("agentlightning.utils.system_snapshot", ()),
    ("agentlightning.instrumentation.litellm", ()),
    ("agentlightning.client", ("AgentLightningClient", "DevTaskLoader")),
    ("agentlightning.server", ("AgentLightningServer",)),
    ("agentlightning.store.client", ("LightningStoreClient",)),
    ("agentlightning.store.server", ("LightningStoreServer",)),
    ("agentlightning.runner.legacy", ("LegacyAgentRunner",)),
    ("agentlightning.trainer.legacy", ("TrainerLegacy",)),
    ("agentlightning.types", ("Hook",)),
    ("agentlightning.types.core", ("Hook",)),
    ("agentlightning.verl", ("AgentModeDaemon", "get_left_padded_ids_and_attention_mask", "load_default_config")),
]

# Documented in the seeds but intentionally not provided (see docs/differences-from-v0.3.md):
#   agentlightning.store.mongo            - PostgreSQL is the multi-host backend here (`agl store` says so)
#   agentlightning.cli.agentops_server    - a broken entry point in the reference itself
#   agentlightning.contrib.*              - third-party integrations outside this package
#   agentlightning.prompts / .models      - paths of an older tutorial; the classes are in agentlightning.types


_PROBE = """
import importlib, json, sys, traceback
errors = {}
for module, names in json.loads(sys.argv[1]):
    try:
        loaded = importlib.import_module(module)
        for name in names:
            getattr(loaded, name)
    except BaseException:
        errors[module] = traceback.format_exc(limit=3)
print(json.dumps(errors))
"""


@pytest.fixture(scope="module")
def import_errors() -> dict[str, str]:
    """Import every module once in a fresh interpreter (so no other test's imports can help them)."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(REFERENCE_MODULES)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("module", "names"), REFERENCE_MODULES, ids=[m for m, _ in REFERENCE_MODULES])
def test_reference_module_path_imports(module: str, names: tuple[str, ...], import_errors: dict[str, str]) -> None:
    assert module not in import_errors, import_errors.get(module)


def test_reference_paths_resolve_to_our_classes() -> None:
    import agentlightning.store.client_server as client_server
    import agentlightning.store.collection_based as collection_based
    from agentlightning.store import CollectionBasedLightningStore, LightningStoreClient, LightningStoreServer

    assert client_server.LightningStoreServer is LightningStoreServer
    assert client_server.LightningStoreClient is LightningStoreClient
    assert collection_based.CollectionBasedLightningStore is CollectionBasedLightningStore


# Each old path (v0.1/v0.3) and the module that holds what it names: the old path is the same object.
OLD_PATHS: list[tuple[str, str, tuple[str, ...]]] = [
    ("agentlightning.store.client", "agentlightning.store_http.client", ("LightningStoreClient", "AUTH_TOKEN_ENV")),
    ("agentlightning.store.server", "agentlightning.store_http.server", ("LightningStoreServer", "DEFAULT_STORE_PORT")),
    ("agentlightning.store.client_server", "agentlightning.store_http.client", ("LightningStoreClient",)),
    ("agentlightning.store.client_server", "agentlightning.store_http.server", ("LightningStoreServer",)),
    ("agentlightning.store.collection_based", "agentlightning.store.collection", ("CollectionBasedLightningStore",)),
    ("agentlightning.store", "agentlightning.store_http.client", ("LightningStoreClient",)),
    ("agentlightning.store", "agentlightning.store_http.server", ("LightningStoreServer",)),
    ("agentlightning.client", "agentlightning.compat.client", ("AgentLightningClient", "DevTaskLoader")),
    ("agentlightning.server", "agentlightning.compat.server", ("AgentLightningServer",)),
    ("agentlightning.runner", "agentlightning.runner.legacy", ("LegacyAgentRunner",)),
    ("agentlightning.runner", "agentlightning.types.hooks", ("Hook",)),
    ("agentlightning.runner.hook", "agentlightning.types.hooks", ("Hook",)),
    ("agentlightning.types", "agentlightning.types.hooks", ("Hook",)),
    ("agentlightning.types.core", "agentlightning.types.hooks", ("Hook",)),
    ("agentlightning", "agentlightning.types.hooks", ("Hook",)),
    ("agentlightning", "agentlightning.compat.client", ("AgentLightningClient", "DevTaskLoader")),
    ("agentlightning", "agentlightning.compat.server", ("AgentLightningServer",)),
]


@pytest.mark.parametrize(("old", "home", "names"), OLD_PATHS, ids=[f"{o}->{h}" for o, h, _ in OLD_PATHS])
def test_old_paths_name_the_objects_of_their_home(old: str, home: str, names: tuple[str, ...]) -> None:
    import importlib

    old_module = importlib.import_module(old)
    home_module = importlib.import_module(home)
    for name in names:
        assert getattr(old_module, name) is getattr(home_module, name), f"{old}.{name}"


def test_v03_trainer_keeps_its_v01_entry_points_without_inheriting_them() -> None:
    from agentlightning import Trainer
    from agentlightning.trainer.legacy import TrainerLegacy

    assert not issubclass(Trainer, TrainerLegacy)
    assert callable(Trainer.fit_v0)
