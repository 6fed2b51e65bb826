"""Run the Claude-Code-style agent (`coding_agent.py`) through the LLM proxy with `agl.Trainer`.

Run (from the repository root):

    python examples/claude_code/train_claude_code.py --quick
        # offline in seconds: a scripted stand-in model behind the proxy runs tests, reads the module,
        # writes a fix and reruns the tests, for each of the 3 task repositories
    agl serve --model smollm2 --port 8000 &   # then:
    python examples/claude_code/train_claude_code.py --base-url http://127.0.0.1:8000/v1 --model smollm2
        # SmolLM2-135M-Instruct on CPU, behind the proxy (Anthropic requests -> chat completions)
    python examples/claude_code/train_claude_code.py --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen3-8B
        # any OpenAI-compatible server, e.g. vLLM (`vllm serve Qwen/Qwen3-8B --port 8000`)
    pip install "agentlightning[litellm]"; export ANTHROPIC_API_KEY=...
    python examples/claude_code/train_claude_code.py --backend anthropic/claude-3-5-haiku-latest
        # a real Claude model, through the proxy's LiteLLM path (no token ids: an API model has none)

The Baseline algorithm evaluates the agent (it does not change the model); the proxy's spans, with token
ids, are what an RL algorithm would train on. What to expect: one line per task with the tools called,
the test score and the number of proxy spans with token ids, then "mean reward: X.XXX over 3 tasks".
Measured numbers are in this folder's README.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from coding_agent import TASKS, ClaudeCodeAgent  # noqa: E402

import agentlightning as agl  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

# The stand-in model knows one fix per module; stats.py has two bugs, so its task ends at 3/4 tests.
KNOWN_FIXES = {
    "calc.py": ("return a - b", "return a + b"),
    "slug.py": ('return "-".join(words)', 'return "-".join(words).lower()'),
    "stats.py": (
        "return ordered[len(ordered) // 2]",
        "middle = len(ordered) // 2\n"
        "    if len(ordered) % 2:\n"
        "        return ordered[middle]\n"
        "    return (ordered[middle - 1] + ordered[middle]) / 2",
    ),
}


def scripted_model(request: Dict[str, Any]) -> Any:
    """The stand-in: run the tests, read the module, write the known fix, rerun the tests, summarise.

    It sees what the backend of the proxy sees: chat completions translated from the agent's Anthropic
    requests (tool calls and `tool` messages).
    """
    messages: List[Dict[str, Any]] = request["messages"]
    calls = [c["function"] for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []]
    instruction = next(str(m["content"]) for m in messages if m.get("role") == "user")
    module = next(word.rstrip(".") for word in instruction.split() if word.endswith(".py") and "test_" not in word)
    last = calls[-1]["name"] if calls else None
    wrote = any(c["name"] == "write_file" for c in calls)

    def call(name: str, **arguments: str) -> Dict[str, Any]:
        return {"content": "", "tool_calls": [{"name": name, "arguments": arguments}]}

    if last is None or last == "write_file":
        return call("run_tests")
    if last == "run_tests" and not wrote:
        return call("read_file", path=module)
    if last == "read_file":
        source = str(messages[-1]["content"])
        old, new = KNOWN_FIXES.get(module, ("", ""))
        return call("write_file", path=module, content=source.replace(old, new, 1) if old else source)
    return "Done: " + str(messages[-1]["content"]).splitlines()[0]


@contextmanager
def backend(args: argparse.Namespace) -> Iterator[Optional[str]]:
    """The chat-completions base URL behind the proxy: the given one, or the scripted stand-in."""
    if args.base_url or args.backend:
        yield args.base_url
        return
    sys.path.insert(0, str(ROOT))  # the repository root, for tests.support
    from tests.support.openai_server import OpenAITestServer

    with OpenAITestServer(scripted_model) as server:
        yield server.base_url


def proxy_entry(args: argparse.Namespace, base_url: Optional[str]) -> Dict[str, Any]:
    """One model-list entry, served to the agent under the name `claude-policy`."""
    if args.backend:  # any LiteLLM model string, e.g. anthropic/claude-3-5-haiku-latest
        return {"model_name": "claude-policy", "litellm_params": {"model": args.backend}}
    params: Dict[str, Any] = {"model": f"hosted_vllm/{args.model}", "api_base": base_url}
    if os.environ.get("OPENAI_API_KEY"):
        params["api_key"] = os.environ["OPENAI_API_KEY"]
    return {"model_name": "claude-policy", "litellm_params": params}


def report(store: agl.LightningStore) -> List[float]:
    """Print one line per rollout (tools called, reward, proxy spans with token ids); return the rewards."""

    async def collect() -> List[float]:
        rewards: List[float] = []
        for rollout in await store.query_rollouts(sort_by="start_time"):
            spans = await store.query_spans(rollout.rollout_id)
            calls = [s for s in spans if s.name == "openai.chat.completion"]
            with_ids = [
                s for s in calls if s.attributes.get("prompt_token_ids") and s.attributes.get("response_token_ids")
            ]
            reward = agl.find_final_reward(spans)
            triplets = agl.LlmProxyTraceToTriplet().adapt(spans)  # what an RL algorithm would train on
            details = next((agl.get_object_value(s) for s in spans if s.name == "agentlightning.object"), {}) or {}
            repo = rollout.input["repo"] if isinstance(rollout.input, dict) else rollout.input
            if rollout.status != "succeeded":  # e.g. the backend refused the call: the error is logged above
                repo = f"{repo}, {rollout.status}"
            print(
                f"  [{repo}] tools={details.get('tool_calls')} reward={reward if reward is None else round(reward, 3)}"
                f" proxy spans={len(calls)} with token ids={len(with_ids)}"
                f" triplets={len(triplets)} last triplet reward={triplets[-1].reward if triplets else None}"
                f" said={str(details.get('final', ''))[:60]!r}"
            )
            rewards.append(reward or 0.0)
        return rewards

    return asyncio.run(collect())


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="scripted stand-in model (the default without a backend)")
    parser.add_argument("--base-url", default=None, help="chat-completions endpoint behind the proxy")
    parser.add_argument("--model", default="smollm2", help="model name served at --base-url")
    parser.add_argument("--backend", default=None, help="a LiteLLM model string instead (needs the litellm extra)")
    parser.add_argument("--n-runners", type=int, default=1, help="runner threads")
    parser.add_argument("--max-turns", type=int, default=8, help="model calls per task at most")
    parser.add_argument("--max-tokens", type=int, default=512, help="max_tokens of each Messages call")
    parser.add_argument("--no-stream", action="store_true", help="plain Messages calls instead of streamed ones")
    args = parser.parse_args(argv)
    if args.quick and (args.base_url or args.backend):
        parser.error("--quick uses the scripted stand-in; drop --base-url/--backend")
    if min(args.n_runners, args.max_turns, args.max_tokens) < 1:
        parser.error("--n-runners, --max-turns and --max-tokens must be at least 1")
    return args


def run(args: argparse.Namespace) -> agl.LightningStore:
    """Evaluate the agent on the 3 tasks through the proxy; the store holds the rollouts and spans."""
    # The proxy runs in a thread of this process and writes its spans straight into this store.
    store = agl.InMemoryLightningStore(thread_safe=True)
    with backend(args) as base_url:
        proxy = agl.LLMProxy(model_list=[proxy_entry(args, base_url)], store=store, launch_mode="thread")
        asyncio.run(proxy.start())
        try:
            llm = proxy.as_resource(sampling_parameters={"temperature": 0.0, "max_tokens": args.max_tokens})
            trainer = agl.Trainer(
                algorithm=agl.Baseline(polling_interval=0.5),
                # Runners are threads of this process, so they share the store the proxy writes to.
                strategy={
                    "type": "shm",
                    "n_runners": args.n_runners,
                    "main_thread": "algorithm",
                    "graceful_delay": 0.5,
                },
                store=store,
                # No client instrumentation: like a real Claude Code binary, the agent is not traced from
                # the inside; every model call is recorded once, by the proxy. Rewards and emitted
                # objects still go through the tracer.
                tracer=agl.OtelTracer(instrument_openai=False),
                llm_proxy=proxy,
                initial_resources={"main_llm": llm},
                summary=False,
            )
            trainer.fit(ClaudeCodeAgent(max_turns=args.max_turns, stream=not args.no_stream), val_dataset=TASKS)
        finally:
            asyncio.run(proxy.stop())
    return store


def main() -> None:
    args = parse_args()
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    started = time.perf_counter()
    store = run(args)
    rewards = report(store)
    mean = sum(rewards) / len(rewards) if rewards else 0.0
    print(f"mean reward: {mean:.3f} over {len(rewards)} tasks ({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
