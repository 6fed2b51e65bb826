"""`examples/claude_code`: the sandbox tools, and the `--quick` run through the proxy's `/v1/messages`."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any, List

import pytest

pytest.importorskip("anthropic", reason="needs the anthropic extra")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "claude_code"))
import train_claude_code  # noqa: E402
from coding_agent import TASKS, Sandbox  # noqa: E402

import agentlightning as agl  # noqa: E402


def test_sandbox_tools_stay_in_the_copy_and_report_bad_calls() -> None:
    sandbox = Sandbox("calc")
    try:
        assert sandbox.run_tests()[:2] == (1, 3)  # add() subtracts: two of three tests fail
        source = sandbox.read_file("calc.py")
        assert "return a - b" in source
        assert sandbox.call("read_file", {"path": "../../etc/passwd"}).startswith("error: path")
        assert "files: ['calc.py', 'test_calc.py']" in sandbox.call("read_file", {"path": "nope.py"})
        assert sandbox.call("write_file", {"path": "calc.py"}) == "error: write_file needs the argument 'content'"
        assert sandbox.call("rm", {}).startswith("error: unknown tool 'rm'")
        sandbox.call("write_file", {"path": "calc.py", "content": source.replace("a - b", "a + b")})
        assert sandbox.call("run_tests", {}).startswith("3/3 tests pass")
        sandbox.write_file("calc.py", "raise RuntimeError('broken')\n")
        passed, total, report = sandbox.run_tests()  # the import fails: the test module is one error
        assert (passed, total) == (0, 1) and "RuntimeError: broken" in report
    finally:
        sandbox.close()
    assert (ROOT / "examples/claude_code/repos/calc/calc.py").read_text().count("return a - b") == 1
    with pytest.raises(ValueError, match="unknown repo"):
        Sandbox("nope")


@pytest.mark.slow
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "plain"])
def test_quick_run_records_proxy_spans_with_token_ids_and_the_test_reward(stream: bool) -> None:
    args = train_claude_code.parse_args(["--quick"] + ([] if stream else ["--no-stream"]))
    store = train_claude_code.run(args)

    async def collect() -> List[Any]:
        found: List[Any] = []
        for rollout in await store.query_rollouts(sort_by="start_time"):
            found.append((rollout, list(await store.query_spans(rollout.rollout_id))))
        return found

    rollouts = asyncio.run(collect())
    assert [r.input["repo"] for r, _ in rollouts] == [t["repo"] for t in TASKS]
    expected = {"calc": 1.0, "slug": 1.0, "stats": 0.75}  # the stand-in knows one of stats.py's two fixes
    for rollout, spans in rollouts:
        assert rollout.status == "succeeded"
        calls = [s for s in spans if s.name == "openai.chat.completion"]
        # run_tests, read_file, write_file, run_tests, then the summary: 5 Messages calls, all via the proxy
        assert len(calls) == 5
        for span in calls:
            assert span.attributes["agentlightning.llm_proxy.client_api"] == "messages"
            assert span.attributes["agentlightning.llm_proxy.stream"] is stream
            for key in ("prompt_token_ids", "response_token_ids"):
                ids = span.attributes[key]
                assert ids and all(isinstance(i, int) for i in ids), key
        assert agl.find_final_reward(spans) == expected[rollout.input["repo"]]
        triplets = agl.LlmProxyTraceToTriplet().adapt(spans)
        assert len(triplets) == 5 and triplets[-1].reward == expected[rollout.input["repo"]]
        assert all(t.prompt["token_ids"] and t.response["token_ids"] for t in triplets)


@pytest.mark.slow
def test_quick_command_prints_the_mean_reward() -> None:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "claude_code" / "train_claude_code.py"), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "[stats] tools=['run_tests', 'read_file', 'write_file', 'run_tests'] reward=0.75" in completed.stdout
    assert "mean reward: 0.917 over 3 tasks" in completed.stdout
