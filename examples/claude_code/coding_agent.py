"""A Claude-Code-style coding agent: the Anthropic Messages API, three tools, a sandbox repository.

Each task is a tiny repository under `repos/` (a module and its unittest file) with failing tests. The
agent copies it to a temporary sandbox and talks to the model with the `anthropic` SDK, offering three
tools: `read_file`, `write_file` and `run_tests`. It runs the tool calls and sends the results back until
the model stops calling tools (at most `max_turns` model calls). The reward is the fraction of the
repository's tests that pass afterwards, measured by the agent itself, not by what the model says.

The model is reached through the LLM proxy (`agl.LLMProxy`): the agent gets a `ProxyLLM` resource and
calls `/rollout/{rollout_id}/attempt/{attempt_id}/v1/messages`. The proxy translates each call to a chat
completion for the backend and records it as a span with its token ids, so the agent needs no tracing
code and the backend can be anything that speaks chat completions (vLLM, `agl serve`, the test server).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Tuple

import anthropic

import agentlightning as agl

REPOS = Path(__file__).resolve().parent / "repos"

TASKS: List[Dict[str, str]] = [
    {"repo": "calc", "instruction": "The tests in test_calc.py fail. Fix calc.py so that they pass."},
    {"repo": "slug", "instruction": "The tests in test_slug.py fail. Fix slug.py so that they pass."},
    {"repo": "stats", "instruction": "The tests in test_stats.py fail. Fix stats.py so that they pass."},
]

SYSTEM_PROMPT = (
    "You are a coding agent working in a small Python repository. Use the tools: run_tests to see what "
    "fails, read_file to read a file, write_file to replace a file's whole content. Fix the code, not the "
    "tests. When the tests pass, answer with a one-line summary and no tool call."
)

TOOLS: List[Dict[str, Any]] = [
    {
        "name": "read_file",
        "description": "Read a file of the repository.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
    {
        "name": "write_file",
        "description": "Replace the whole content of a file of the repository.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
    {
        "name": "run_tests",
        "description": "Run the repository's unit tests; returns how many pass and the failures.",
        "input_schema": {"type": "object", "properties": {}},
    },
]

# Runs every test_*.py of the current directory and prints {"passed", "total", "report"} as JSON.
_TEST_RUNNER = """
import io, json, unittest
stream = io.StringIO()
suite = unittest.defaultTestLoader.discover(".", pattern="test_*.py")
result = unittest.TextTestRunner(stream=stream, verbosity=1).run(suite)
bad = len(result.failures) + len(result.errors)
print(json.dumps({"passed": result.testsRun - bad, "total": result.testsRun, "report": stream.getvalue()[-1500:]}))
"""


class Sandbox:
    """A private copy of one task repository; paths given by the model are confined to it."""

    def __init__(self, repo: str) -> None:
        source = REPOS / repo
        if not source.is_dir():
            raise ValueError(f"unknown repo {repo!r}; known: {sorted(p.name for p in REPOS.iterdir())}")
        self._tmp = tempfile.TemporaryDirectory(prefix=f"claude_code_{repo}_")
        self.root = Path(self._tmp.name)
        shutil.copytree(source, self.root, dirs_exist_ok=True)

    def close(self) -> None:
        self._tmp.cleanup()

    def _path(self, path: str) -> Path:
        resolved = (self.root / path).resolve()
        if resolved != self.root and self.root.resolve() not in resolved.parents:
            raise ValueError(f"path {path!r} is outside the repository")
        return resolved

    def read_file(self, path: str) -> str:
        target = self._path(path)
        if not target.is_file():
            files = sorted(p.name for p in self.root.iterdir() if p.is_file())
            raise ValueError(f"no file {path!r}; files: {files}")
        return target.read_text()

    def write_file(self, path: str, content: str) -> str:
        target = self._path(path)
        target.write_text(content)
        return f"wrote {len(content)} characters to {path}"

    def run_tests(self) -> Tuple[int, int, str]:
        """(passed, total, report) of the repository's tests, run in a fresh interpreter."""
        try:
            completed = subprocess.run(
                [sys.executable, "-c", _TEST_RUNNER],
                cwd=self.root,
                capture_output=True,
                text=True,
                timeout=30,
            )
        except subprocess.TimeoutExpired:
            return 0, 0, "the tests timed out after 30 s"
        try:
            outcome = json.loads(completed.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            return 0, 0, f"the test run crashed:\n{completed.stderr[-1500:]}"
        return int(outcome["passed"]), int(outcome["total"]), str(outcome["report"])

    def call(self, name: str, arguments: Dict[str, Any]) -> str:
        """Run one tool call; a bad call becomes an error message for the model, never an exception."""
        try:
            if name == "read_file":
                return self.read_file(str(arguments["path"]))
            if name == "write_file":
                return self.write_file(str(arguments["path"]), str(arguments["content"]))
            if name == "run_tests":
                passed, total, report = self.run_tests()
                return f"{passed}/{total} tests pass\n{report}"
            return f"error: unknown tool {name!r}; use read_file, write_file or run_tests"
        except KeyError as missing:
            return f"error: {name} needs the argument {missing}"
        except (ValueError, OSError) as exc:
            return f"error: {exc}"


@dataclass
class Session:
    """What one agent run did: the tools it called, its last words, and the tests afterwards."""

    tool_calls: List[str] = field(default_factory=list)
    final_text: str = ""
    turns: int = 0
    passed: int = 0
    total: int = 0


def solve(
    client: anthropic.Anthropic,
    model: str,
    sandbox: Sandbox,
    instruction: str,
    *,
    max_turns: int = 8,
    max_tokens: int = 512,
    stream: bool = True,
    **sampling: Any,
) -> Session:
    """The tool loop: ask the model, run the tools it calls, send back the results, until it stops."""
    session = Session()
    messages: List[Dict[str, Any]] = [{"role": "user", "content": instruction}]
    for turn in range(1, max_turns + 1):
        session.turns = turn
        request: Dict[str, Any] = dict(
            model=model, max_tokens=max_tokens, system=SYSTEM_PROMPT, tools=TOOLS, messages=messages
        )
        if sampling:  # recent SDKs have no `temperature` argument; the proxy still reads it from the body
            request["extra_body"] = sampling
        if stream:  # token by token, as Claude Code reads its model
            with client.messages.stream(**request) as events:
                reply = events.get_final_message()
        else:
            reply = client.messages.create(**request)
        messages.append({"role": "assistant", "content": [block.model_dump() for block in reply.content]})
        uses = [block for block in reply.content if block.type == "tool_use"]
        if not uses:
            session.final_text = "".join(block.text for block in reply.content if block.type == "text")
            break
        results: List[Dict[str, Any]] = []
        for use in uses:
            session.tool_calls.append(use.name)
            arguments = use.input if isinstance(use.input, dict) else {}
            output = sandbox.call(use.name, arguments)  # type: ignore[arg-type]
            results.append({"type": "tool_result", "tool_use_id": use.id, "content": output})
        messages.append({"role": "user", "content": results})
    session.passed, session.total, _ = sandbox.run_tests()
    return session


def anthropic_base_url(llm: agl.LLM, rollout: agl.Rollout) -> str:
    """The rollout's proxy URL without `/v1` (the Anthropic client adds `/v1/messages` itself)."""
    if isinstance(llm, agl.ProxyLLM):
        attempt_id = rollout.attempt.attempt_id if isinstance(rollout, agl.AttemptedRollout) else None
        base = llm.get_base_url(rollout.rollout_id, attempt_id)
    else:
        base = llm.get_base_url()
    return base[: -len("/v1")] if base.rstrip("/").endswith("/v1") else base


class ClaudeCodeAgent(agl.LitAgent[Dict[str, str]]):
    """The trainable agent: the `LLM` resource (the proxy) answers; reward = fraction of tests passing."""

    def __init__(self, max_turns: int = 8, stream: bool = True) -> None:
        super().__init__()
        self.max_turns = max_turns
        self.stream = stream

    def rollout(self, task: Dict[str, str], resources: agl.NamedResources, rollout: agl.Rollout) -> float:
        llm = next(r for r in resources.values() if isinstance(r, agl.LLM))
        client = anthropic.Anthropic(
            base_url=anthropic_base_url(llm, rollout), api_key=llm.api_key or "EMPTY", max_retries=0
        )
        sampling = dict(llm.sampling_parameters)
        max_tokens = int(sampling.pop("max_tokens", 512))
        sandbox = Sandbox(task["repo"])
        try:
            session = solve(
                client,
                llm.model,
                sandbox,
                task["instruction"],
                max_turns=self.max_turns,
                max_tokens=max_tokens,
                stream=self.stream,
                **sampling,
            )
        finally:
            sandbox.close()
            client.close()
        agl.emit_object({"tool_calls": session.tool_calls, "turns": session.turns, "final": session.final_text[:200]})
        return session.passed / session.total if session.total else 0.0
