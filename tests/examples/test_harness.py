"""The harnessed agents of `examples/harness/` (a Python script and a Node.js program, neither importing
agentlightning) run through `Trainer.dev` / `Trainer.fit` with `ProcessAgent` against the loopback
OpenAI server, and land in a SQLite store as spans with exact token ids, rewards and triplets.
"""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.openai_server import OpenAITestServer, chat_prompt_token_ids, reply_token_ids

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "examples" / "harness"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_harness", HARNESS / "run_harness.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_agents_never_import_agentlightning() -> None:
    for path in (HARNESS / "python_agent.py", HARNESS / "node_agent.mjs"):
        assert "agentlightning" not in path.read_text().replace("never imports agentlightning", "")


def check_llm_spans(summary: list[dict[str, Any]], server: OpenAITestServer, calls_per_rollout: int) -> None:
    """Every LLM span carries exactly the token ids the server produced for that request."""
    # Rollouts run concurrently, so requests and responses are paired by content, not by position.
    responses = {response["id"]: response for response in server.responses}
    assert len(responses) == len(server.requests) == calls_per_rollout * len(summary)

    def request_of(response: dict[str, Any]) -> dict[str, Any]:
        (request,) = [
            r for r in server.requests if chat_prompt_token_ids(r["messages"]) == response["prompt_token_ids"]
        ]
        return request

    for item in summary:
        llm_spans = [s for s in item["spans"] if s.name == "openai.chat.completion"]
        assert len(llm_spans) == calls_per_rollout
        for span in llm_spans:
            response = responses[span.attributes["gen_ai.response.id"]]
            request = request_of(response)
            assert request["return_token_ids"] is True
            assert request["temperature"] == (1.0 if item["mode"] == "train" else 0.7)
            assert span.attributes["prompt_token_ids"] == chat_prompt_token_ids(request["messages"])
            assert span.attributes["prompt_token_ids"] == response["prompt_token_ids"]
            assert span.attributes["response_token_ids"] == reply_token_ids(response["choices"][0]["message"])
        triplets = item["triplets"]
        assert len(triplets) == calls_per_rollout
        assert [t.prompt["token_ids"] for t in triplets] == [s.attributes["prompt_token_ids"] for s in llm_spans]
        assert [t.response["token_ids"] for t in triplets] == [s.attributes["response_token_ids"] for s in llm_spans]
        assert triplets[-1].reward == 1.0


@pytest.mark.slow
def test_python_agent_through_trainer_dev(tmp_path: Path) -> None:
    example = load_example()
    with OpenAITestServer(example.answer_sums) as server:
        summary = example.run("python", str(tmp_path / "harness.db"), server.base_url, "test-model", False)
    assert len(summary) == 3
    assert sorted(item["mode"] for item in summary) == ["train", "train", "val"]
    assert all(item["status"] == "succeeded" and item["reward"] == 1.0 for item in summary)
    # two calls per rollout: a plain one, then a streamed one (token ids rebuilt from the chunks)
    check_llm_spans(summary, server, calls_per_rollout=2)
    streamed = [r for r in server.requests if r.get("stream")]
    assert len(streamed) == 3


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_node_agent_through_trainer_fit(tmp_path: Path) -> None:
    example = load_example()
    with OpenAITestServer(example.answer_sums) as server:
        summary = example.run("node", str(tmp_path / "harness.db"), server.base_url, "test-model", True)
    assert len(summary) == 3
    assert all(item["status"] == "succeeded" and item["reward"] == 1.0 for item in summary)
    check_llm_spans(summary, server, calls_per_rollout=1)
    for item in summary:
        notes = [s for s in item["spans"] if s.attributes.get("agentlightning.event_type") == "note"]
        assert len(notes) == 1 and notes[0].attributes["language"] == "javascript"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_node_agent_in_client_server_runner_processes(tmp_path: Path) -> None:
    """Runner processes get a pickled ProcessAgent; each starts its own gateway over its store client."""
    import agentlightning as agl
    from agentlightning.store.sqlite import SqliteLightningStore
    from agentlightning.web.launcher import pick_free_port

    example = load_example()
    db = str(tmp_path / "cs.db")
    with OpenAITestServer(example.answer_sums) as server:
        trainer = agl.Trainer(
            algorithm=agl.Baseline(polling_interval=0.1, span_verbosity="none"),
            store=SqliteLightningStore(db),
            n_runners=2,
            strategy={"type": "cs", "server_host": "127.0.0.1", "graceful_timeout": 3.0, "terminate_timeout": 3.0},
            port=pick_free_port(),
            runner={"poll_interval": 0.05, "heartbeat_interval": 60.0},
            initial_resources={"llm": agl.LLM(endpoint=server.base_url, model="test-model")},
        )
        trainer.dev(example.make_agent("node"), example.TASKS, val_dataset=example.VAL_TASKS)
        reader = SqliteLightningStore(db)
        try:
            summary = asyncio.run(example.summarize(reader))
        finally:
            asyncio.run(reader.close())
        check_llm_spans(summary, server, calls_per_rollout=1)
    assert len(summary) == 3 and all(item["status"] == "succeeded" for item in summary)
