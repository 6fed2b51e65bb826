"""Acceptance: agents instrumented only with the official OpenTelemetry GenAI instrumentations, exporting OTLP
to `agl store`, end as triplets and rewards in the store.

- Python: `opentelemetry-instrumentation-openai-v2`, in both of its modes: the latest GenAI conventions
  (messages as `gen_ai.input.messages` / `gen_ai.output.messages` span attributes) and its default v1.30
  conventions (messages as OTLP log events `gen_ai.user.message`, `gen_ai.choice`, ...).
- Node.js: `@opentelemetry/sdk-node` + `@opentelemetry/instrumentation-openai` from npm (messages as log
  events), installed with `npm ci` from the lock file into a cache folder on first use.

Calls made straight to a model server carry no token ids: the adapter retokenizes them with the policy's
tokenizer and flags them. A call made through `agl gateway` gets the token ids the gateway recorded.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import httpx
import pytest

from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.gateway.keys import attempt_key
from agentlightning.gateway.server import rollout_urls
from agentlightning.store import LightningStoreClient
from agentlightning.types import AttemptedRollout, Span, Triplet
from tests.cli.test_cli import running
from tests.execution.conftest import pick_free_port
from tests.support.openai_server import OpenAITestServer
from tests.support.tiny_model import tiny_tokenizer

pytestmark = [pytest.mark.slow]

AGENTS = Path(__file__).resolve().parents[1] / "support" / "genai_agents"
QUESTION, ANSWER = "What is the capital of France?", "The capital is Paris."
AGENT_TIMEOUT = 120


@pytest.fixture(scope="module")
def store_url() -> Iterator[str]:
    port = pick_free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with running(["store", "--port", str(port)], f"{endpoint}/v1/agl/health"):
        yield endpoint


@pytest.fixture(scope="module")
def llm() -> Iterator[OpenAITestServer]:
    with OpenAITestServer(lambda request: ANSWER) as server:
        yield server


def _run(coroutine_factory: Any) -> Any:
    return asyncio.run(coroutine_factory())


def start_rollout(store_url: str) -> AttemptedRollout:
    async def start() -> AttemptedRollout:
        client = LightningStoreClient(store_url)
        try:
            return await client.start_rollout(input={"question": QUESTION}, mode="train")
        finally:
            await client.close()

    return _run(start)


def finish_and_read(store_url: str, rollout: AttemptedRollout) -> tuple[list[Span], dict[str, Any]]:
    """Mark the attempt succeeded; the stored spans and what the store server extracts from them."""

    async def finish() -> list[Span]:
        client = LightningStoreClient(store_url)
        try:
            await client.update_attempt(rollout.rollout_id, rollout.attempt.attempt_id, status="succeeded")
            return list(await client.query_spans(rollout.rollout_id))
        finally:
            await client.close()

    spans = _run(finish)
    extracted = httpx.get(f"{store_url}/v1/agl/rollouts/{rollout.rollout_id}/triplets", timeout=30)
    assert extracted.status_code == 200, extracted.text
    return spans, extracted.json()


def otel_env(store_url: str, rollout: AttemptedRollout, base_url: str, **extra: str) -> dict[str, str]:
    """Only the standard OpenTelemetry and OpenAI variables: that is all the agent is told."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=store_url,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_RESOURCE_ATTRIBUTES=(
            f"agentlightning.rollout_id={rollout.rollout_id},agentlightning.attempt_id={rollout.attempt.attempt_id}"
        ),
        OTEL_METRICS_EXPORTER="none",
        OPENAI_BASE_URL=base_url,
        OPENAI_API_KEY="test-key",
        **extra,
    )
    return env


@dataclass
class AgentRun:
    rollout: AttemptedRollout
    process: subprocess.Popen[str]
    spans: list[Span] = field(default_factory=lambda: [])
    extracted: dict[str, Any] = field(default_factory=lambda: {})


def launch(command: list[str], env: dict[str, str], cwd: Path, rollout: AttemptedRollout) -> AgentRun:
    process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return AgentRun(rollout, process)


def wait(run: AgentRun, store_url: str) -> None:
    try:
        output, _ = run.process.communicate(timeout=AGENT_TIMEOUT)
    except subprocess.TimeoutExpired:
        run.process.kill()
        output, _ = run.process.communicate()
    assert run.process.returncode == 0, f"{run.process.args} failed:\n{output}"
    assert "reward=1.0" in output, output
    run.spans, run.extracted = finish_and_read(store_url, run.rollout)


def check_two_turns(triplets: list[Triplet], *, retokenized: bool) -> None:
    """Two calls in order, the reward on the last, messages as sent, and token ids that continue."""
    assert len(triplets) == 2
    first, second = triplets
    assert [m["content"] for m in first.prompt["raw_content"]] == ["Answer in one short sentence.", QUESTION]
    assert [m["role"] for m in second.prompt["raw_content"]] == ["system", "user", "assistant", "user"]
    assert second.prompt["raw_content"][-1]["content"] == "Say it again."
    assert first.response["raw_content"][0]["content"] == ANSWER
    assert (first.reward, second.reward) == (None, 1.0)
    for triplet in triplets:
        assert triplet.prompt["token_ids"] and triplet.response["token_ids"]
        assert (triplet.metadata.get("token_ids_source") == "retokenized") is retokenized
    # The second prompt re-renders the first exchange token for token: one trajectory row.
    assert second.prompt["token_ids"][: len(first.prompt["token_ids"]) + len(first.response["token_ids"])] == (
        first.prompt["token_ids"] + first.response["token_ids"]
    )


def _node_agent_dir() -> Optional[Path]:
    """The Node agent with its npm packages, installed once per lock file into a cache folder (None: no npm)."""
    npm = shutil.which("npm")
    if shutil.which("node") is None or npm is None:
        return None
    lock = (AGENTS / "node" / "package-lock.json").read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentlightning-tests"
    target = cache / f"node-genai-agent-{hashlib.sha256(lock).hexdigest()[:12]}"
    if not (target / "node_modules" / "@opentelemetry" / "instrumentation-openai").exists():
        target.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copy(AGENTS / "node" / name, target / name)
        result = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--silent"], cwd=target, capture_output=True, text=True, timeout=300
        )
        if result.returncode != 0:
            raise RuntimeError(f"npm ci could not install the Node agent's packages: {result.stderr[-500:]}")
    shutil.copy(AGENTS / "node" / "agent.cjs", target / "agent.cjs")
    return target


@pytest.fixture(scope="module")
def runs(store_url: str, llm: OpenAITestServer) -> Iterator[dict[str, Optional[AgentRun]]]:
    """The three agents, run at the same time (each its own rollout), and what they left in the store."""
    pytest.importorskip("opentelemetry.instrumentation.openai_v2", reason="opentelemetry-instrumentation-openai-v2")
    python_agent = [sys.executable, str(AGENTS / "openai_v2_agent.py"), QUESTION, "Paris"]
    latest = {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only",
    }
    node_folder = _node_agent_dir()
    port = pick_free_port()
    gateway = f"http://127.0.0.1:{port}"
    args = ["gateway", "--port", str(port), "--store-url", store_url, "--upstream", llm.base_url, "--secret", "s"]
    with running(args, f"{gateway}/health"):
        launched: dict[str, Optional[AgentRun]] = {}
        # v1.30 conventions (the default): messages as OTLP log events; straight to the model server.
        rollout = start_rollout(store_url)
        env = otel_env(store_url, rollout, llm.base_url, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true")
        launched["python"] = launch(python_agent, env, AGENTS, rollout)
        # Latest conventions (messages as span attributes), through the gateway.
        rollout = start_rollout(store_url)
        base_url, _ = rollout_urls(gateway, rollout.rollout_id, rollout.attempt.attempt_id, "train")
        env = otel_env(store_url, rollout, base_url, **latest)
        env["OPENAI_API_KEY"] = attempt_key("s", rollout.rollout_id, rollout.attempt.attempt_id)
        launched["python-gateway"] = launch(python_agent, env, AGENTS, rollout)
        # Node.js: messages as log events; straight to the model server.
        launched["node"] = None
        if node_folder is not None:
            rollout = start_rollout(store_url)
            env = otel_env(store_url, rollout, llm.base_url, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true")
            launched["node"] = launch(["node", "agent.cjs", QUESTION, "Paris"], env, node_folder, rollout)
        for run in launched.values():
            if run is not None:
                wait(run, store_url)
    yield launched


def test_python_openai_v2_agent_ends_as_triplets_and_rewards(runs: dict[str, Optional[AgentRun]]) -> None:
    run = runs["python"]
    assert run is not None
    llm_spans = [s for s in run.spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert [s.name for s in llm_spans] == ["chat agent-model", "chat agent-model"]
    events = [s.name for s in run.spans if s.attributes.get("agentlightning.log_event") is True]
    assert events.count("gen_ai.choice") == 2 and "gen_ai.assistant.message" in events
    # In the store: the server's own extraction (no tokenizer) has both calls and the reward.
    assert run.extracted["final_reward"] == 1.0 and len(run.extracted["triplets"]) == 2
    assert run.extracted["triplets"][-1]["reward"] == 1.0
    # For RL: the policy tokenizer fills the token ids, flagged.
    adapter = TracerTraceToTriplet(tokenizer=tiny_tokenizer())
    check_two_turns(adapter.adapt(run.spans), retokenized=True)
    assert adapter.last_report is not None and adapter.last_report.n_triplets_retokenized == 2


def test_python_agent_through_the_gateway_keeps_the_recorded_token_ids(runs: dict[str, Optional[AgentRun]]) -> None:
    run = runs["python-gateway"]
    assert run is not None
    agent_spans = [s for s in run.spans if s.name == "chat agent-model"]
    assert len(agent_spans) == 2
    assert all(
        s.attributes["gen_ai.provider.name"] == "openai" and "gen_ai.input.messages" in s.attributes
        for s in agent_spans
    )
    assert run.extracted["final_reward"] == 1.0
    # The agent's span and the gateway's span of each call share the response id: one triplet, with the
    # gateway's token ids (nothing retokenized) and the agent's messages.
    adapter = TracerTraceToTriplet(tokenizer=tiny_tokenizer())
    triplets = adapter.adapt(run.spans)
    check_two_turns(triplets, retokenized=False)
    assert all(len(t.metadata.get("merged_span_ids", [])) == 1 for t in triplets)
    assert adapter.last_report is not None and adapter.last_report.n_triplets_retokenized == 0


def test_node_instrumentation_openai_agent_ends_as_triplets_and_rewards(runs: dict[str, Optional[AgentRun]]) -> None:
    run = runs["node"]
    if run is None:
        pytest.skip("node/npm are not installed")
    llm_spans = [s for s in run.spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert [s.name for s in llm_spans] == ["chat agent-model", "chat agent-model"]
    events = [s.name for s in run.spans if s.attributes.get("agentlightning.log_event") is True]
    assert events.count("gen_ai.choice") == 2 and events.count("gen_ai.user.message") == 3
    assert run.extracted["final_reward"] == 1.0 and len(run.extracted["triplets"]) == 2
    adapter = TracerTraceToTriplet(tokenizer=tiny_tokenizer())
    check_two_turns(adapter.adapt(run.spans), retokenized=True)
