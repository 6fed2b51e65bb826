"""Write traces into a LightningStore with `OtelTracer`, then read them back: the tracer without a runner.

Inside one `tracer.trace_context(...)` for a rollout attempt this script records, in order:
  1. two nested raw OpenTelemetry spans ("plan" containing "lookup"),
  2. an `agentlightning.message` span (`emit_message`) and an `agentlightning.object` span (`emit_object`),
  3. an `agentlightning.operation` span with input and output (`operation`),
  4. an `openai.chat.completion` span, captured automatically from a plain OpenAI client call,
  5. a reward span (`emit_reward`).
It then marks the attempt succeeded and prints the rollout and its spans.

Run (from the repository root):

    python examples/minimal/write_traces.py
    python examples/minimal/write_traces.py --store-url http://127.0.0.1:4747   # an `agl store` server
    python examples/minimal/write_traces.py --base-url https://api.openai.com/v1 --model gpt-4.1-nano

Without `--base-url`, a loopback OpenAI-compatible server (`tests/support/openai_server.py`) is started
in-process so the script runs offline. Without `--store-url`, an `InMemoryLightningStore` is used.

What to expect: the rollout (status 'succeeded'), then "7 spans" listed by sequence id. Spans are stored
when they *end*, so "lookup" comes before "plan"; the LLM span carries `gen_ai.prompt.*`,
`gen_ai.completion.*`, `prompt_token_ids` and `response_token_ids`; the last span is the reward (0.9).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

from openai import AsyncOpenAI

import agentlightning as agl
from agentlightning.store.base import LightningStore


@contextmanager
def openai_endpoint(base_url: Optional[str]) -> Iterator[str]:
    """The given endpoint, or a loopback server started for the duration."""
    if base_url:
        yield base_url
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for tests.support
    from tests.support.openai_server import OpenAITestServer

    with OpenAITestServer(always_return_token_ids=True) as server:
        yield server.base_url


def brief(value: Any, width: int = 70) -> Any:
    text = repr(value)
    return value if len(text) <= width else text[:width] + "..."


async def write_traces(store: LightningStore, base_url: str, model: str, api_key: str) -> str:
    """Record one traced attempt into `store`; returns the rollout id."""
    tracer = agl.OtelTracer()
    rollout = await store.start_rollout(input={"origin": "write_traces example"})
    attempt_id = rollout.attempt.attempt_id
    with tracer.lifespan(store):
        async with tracer.trace_context("write-traces", rollout_id=rollout.rollout_id, attempt_id=attempt_id) as otel:
            with otel.start_as_current_span("plan", attributes={"plan.steps": 2}):
                with otel.start_as_current_span("lookup", attributes={"lookup.query": "capital of France"}):
                    pass
            agl.emit_message("Looked up the capital; asking the model to confirm.")
            agl.emit_object({"candidates": ["Paris", "Lyon"], "confidence": 0.8})
            with agl.operation(step="format") as op:
                op.set_input(city="Paris")
                op.set_output("The capital is Paris.")
            client = AsyncOpenAI(base_url=base_url, api_key=api_key)
            reply = await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Is Paris the capital of France?"}]
            )
            print(f"Model replied: {reply.choices[0].message.content!r}")
            agl.emit_reward(0.9)
    await store.update_attempt(rollout.rollout_id, attempt_id, status="succeeded")
    return rollout.rollout_id


async def show(store: LightningStore, rollout_id: str) -> None:
    print(repr(await store.get_rollout_by_id(rollout_id)))
    spans = await store.query_spans(rollout_id)
    print(f"{len(spans)} spans:")
    for span in spans:
        attributes = {key: brief(value) for key, value in span.attributes.items()}
        print(f"  #{span.sequence_id} {span.name} (parent {span.parent_id}): {attributes}")


async def main_async(args: argparse.Namespace) -> None:
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY") or "dummy"
    store: LightningStore
    if args.store_url:
        store = agl.LightningStoreClient(args.store_url)
    else:
        store = agl.InMemoryLightningStore()
    try:
        with openai_endpoint(args.base_url) as base_url:
            rollout_id = await write_traces(store, base_url, args.model, api_key)
        await show(store, rollout_id)
    finally:
        await store.close()


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store-url", default=None, help="a running store server (default: in-memory store)")
    parser.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint (default: a loopback server)")
    parser.add_argument("--model", default="gpt-4.1-nano")
    parser.add_argument("--api-key", default=None, help="API key (default: $OPENAI_API_KEY)")
    asyncio.run(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
