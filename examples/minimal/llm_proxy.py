"""Put the LLM proxy in front of a model server and watch it record each call as spans of a rollout.

The proxy (`agl.LLMProxy`) is an OpenAI-compatible endpoint that forwards to the model servers in its
model list. Agents that cannot be instrumented (another language, a closed binary, a process you do not
control) only need its URL: a call to `/rollout/{rollout_id}/attempt/{attempt_id}/v1/chat/completions`
is forwarded, and the request, the response and the token ids are written to the store as spans of
that attempt. This script:

  1. starts a model server (the echo server, or `--base-url` for a real one),
  2. starts a store and the proxy (serving the model under the name "policy"),
  3. starts a rollout and makes two chat calls through the rollout's proxy URL with a plain OpenAI
     client (no agentlightning tracer anywhere),
  4. reads the spans back and turns them into triplets with `LlmProxyTraceToTriplet`.

Run (from the repository root):

    python examples/minimal/llm_proxy.py                      # offline: the echo server stands in
    python examples/minimal/llm_proxy.py --base-url http://127.0.0.1:8000/v1 --model smollm2
                                                              # after `agl serve --model smollm2`

What to expect: "proxy at http://127.0.0.1:PORT", the two replies (with the echo server, your own
questions), "4 spans recorded for ro-..." (each call, and under it the raw request the proxy sent, as
v0.3 records them), one line per span with its name and the number of prompt and response token ids,
and "2 triplets" with the same token counts: the proxy asked the backend for token
ids, so the calls are ready for RL without any tracing code in the agent.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional

from openai import OpenAI

import agentlightning as agl
from agentlightning.serving.echo import EchoServer

QUESTIONS = ["What is 6 times 7?", "And 6 times 8?"]


@contextmanager
def model_server(base_url: Optional[str]) -> Iterator[str]:
    """The backend's OpenAI base URL: the given one, or an echo server started for the duration."""
    if base_url:
        yield base_url
        return
    with EchoServer() as server:
        yield server.endpoint


async def run(base_url: str, model: str) -> None:
    store = agl.InMemoryLightningStore(thread_safe=True)  # the proxy writes spans from its own thread
    proxy = agl.LLMProxy(
        model_list=[
            {"model_name": "policy", "litellm_params": {"model": f"hosted_vllm/{model}", "api_base": base_url}}
        ],
        store=store,
        launch_mode="thread",
    )
    await proxy.start()
    try:
        print(f"proxy at {proxy.endpoint}")
        attempted = await store.start_rollout(input={"questions": QUESTIONS})
        llm = proxy.as_resource(attempted.rollout_id, attempted.attempt.attempt_id)
        client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "EMPTY")
        messages: list[dict[str, str]] = []
        for question in QUESTIONS:
            messages.append({"role": "user", "content": question})
            reply = await asyncio.to_thread(
                client.chat.completions.create,
                model=llm.model,
                messages=messages,  # type: ignore[arg-type]
                max_tokens=32,
            )
            answer = reply.choices[0].message.content or ""
            messages.append({"role": "assistant", "content": answer})
            print(f"Q: {question}\nA: {answer.strip()[:80]}")
        spans = await store.query_spans(attempted.rollout_id)
        print(f"{len(spans)} spans recorded for {attempted.rollout_id}")
        for span in spans:
            prompt_ids = span.attributes.get("prompt_token_ids") or []
            response_ids = span.attributes.get("response_token_ids") or []
            print(f"  #{span.sequence_id} {span.name}: {len(prompt_ids)} prompt ids, {len(response_ids)} response ids")
        triplets, report = agl.LlmProxyTraceToTriplet().adapt_with_report(spans)
        print(
            f"{len(triplets)} triplets: "
            + ", ".join(f"{len(t.prompt['token_ids'])}+{len(t.response['token_ids'])} tokens" for t in triplets)
        )
        if report.dropped:
            print(f"dropped: {report.drop_counts}")
    finally:
        await proxy.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", default=None, help="the model server (default: an echo server started here)")
    parser.add_argument("--model", default="echo", help="the model name the backend serves")
    args = parser.parse_args()
    with model_server(args.base_url) as base_url:
        asyncio.run(run(base_url, args.model))


if __name__ == "__main__":
    main()
