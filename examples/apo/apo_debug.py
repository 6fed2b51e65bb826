"""Debug an APO-style agent without an algorithm: drive single rollouts with a runner, or watch them with a hook.

The agent here, `room_selector`, is a one-call cousin of the one in `room_selector.py`: given a meeting
request, it fills a `PromptTemplate` (the resource APO would optimise), asks the LLM resource to pick a
meeting room, and returns 1.0 when the pick is the expected room (else 0.0). The runner turns that float into a reward span.
The same two debugging modes work unchanged for any agent, `room_selector.py`'s included.

Run (from the repository root):

    python examples/apo/apo_debug.py --mode runner   # runner.step(...), then print the rollout and its spans
    python examples/apo/apo_debug.py --mode hook     # same, with a Hook printing the trace at on_trace_end
    python examples/apo/apo_debug.py --mode trainer  # Trainer.dev: the Baseline algorithm logs every rollout

By default a loopback OpenAI-compatible server (`tests/support/openai_server.py`) is started in-process
and stands in for the model, so the script runs offline; it "answers" with the first listed room that is
large enough and has the requested equipment. Use a real model with
`--base-url https://api.openai.com/v1 --model gpt-4.1-nano` (the API key comes from `--api-key` or
`OPENAI_API_KEY`).

What to expect: in `runner` mode, a list with one rollout whose status is 'succeeded', then its spans in
sequence order: an `openai.chat.completion` span (prompt, response and token ids as `gen_ai.*`
attributes) followed by the reward span (`agentlightning.annotation` with
`agentlightning.reward.0.value`). In `hook` mode, "Trace spans collected during the rollout:" followed by
one line per span the tracer captured while the agent ran (the LLM call), then the rollout's final status.
In `trainer` mode, the Baseline log of a dry run over two tasks with one runner process: "Initial
resources set", one "Enqueued rollout ..." line per task, and for each rollout "Finished with status
succeeded", its attempt, one line per span (`openai.chat.completion`, then the reward span) with the
attribute keys, and "Adapted data: [Triplet(...)]" with the reward matched to the LLM call.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Optional, TypedDict

from openai import OpenAI

import agentlightning as agl

ROOMS = [
    {"name": "Orion", "capacity": 4, "equipment": ["tv"]},
    {"name": "Lyra", "capacity": 10, "equipment": ["projector", "whiteboard"]},
    {"name": "Vega", "capacity": 12, "equipment": ["whiteboard"]},
]

PROMPT = agl.PromptTemplate(
    template=(
        "You book meeting rooms. Rooms:\n{rooms}\n"
        "Request: {attendees} attendees, needs {needs}.\n"
        "Reply with the name of the single best room and nothing else."
    ),
    engine="f-string",
)


class RoomTask(TypedDict):
    id: str
    attendees: int
    needs: list[str]
    expected_choice: str


TASK: RoomTask = {"id": "room-1", "attendees": 8, "needs": ["projector"], "expected_choice": "Lyra"}
SMALL_TASK: RoomTask = {"id": "room-2", "attendees": 3, "needs": ["tv"], "expected_choice": "Orion"}


@agl.prompt_rollout
def room_selector(task: RoomTask, prompt_template: agl.PromptTemplate, llm: agl.LLM) -> float:
    """Ask the LLM for a room; reward 1.0 for the expected room, else 0.0."""
    rooms = "\n".join(f"- {r['name']}: capacity {r['capacity']}, equipment {', '.join(r['equipment'])}" for r in ROOMS)
    prompt = prompt_template.format(rooms=rooms, attendees=task["attendees"], needs=", ".join(task["needs"]))
    client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "dummy")
    reply = client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": prompt}], temperature=0.0
    )
    answer = (reply.choices[0].message.content or "").strip()
    choice = next((r["name"] for r in ROOMS if r["name"].lower() in answer.lower()), None)
    return 1.0 if choice == task["expected_choice"] else 0.0


class DebugHook(agl.Hook):
    """Print every span the tracer captured while the agent ran."""

    async def on_trace_end(self, *, agent: Any, runner: Any, tracer: agl.Tracer, rollout: agl.Rollout) -> None:
        print("Trace spans collected during the rollout:")
        for span in tracer.get_last_trace():
            print(f"- {span.name} (status: {span.status.status_code}):\n  {brief_attributes(span.attributes)}")


def brief_attributes(attributes: dict[str, Any], width: int = 80) -> dict[str, Any]:
    """Attributes with long values shortened, so a span fits on a few lines."""
    return {k: (v if len(repr(v)) <= width else repr(v)[:width] + "...") for k, v in attributes.items()}


def brief_span(span: agl.Span) -> str:
    return (
        f"Span(rollout_id={span.rollout_id!r}, attempt_id={span.attempt_id!r}, sequence_id={span.sequence_id}, ..., "
        f"name={span.name!r}, attributes={brief_attributes(span.attributes)}, ...)"
    )


def loopback_responder(request: dict[str, Any]) -> str:
    """The stand-in model: the first room in the prompt that fits the attendees and has the equipment."""
    prompt = str(request["messages"][-1]["content"])
    request_match = re.search(r"Request: (\d+) attendees, needs (.+)\.", prompt)
    if request_match is None:
        return "I cannot tell."
    attendees, needs = int(request_match.group(1)), [n.strip() for n in request_match.group(2).split(",")]
    for name, capacity, equipment in re.findall(r"- (\w+): capacity (\d+), equipment ([^\n]+)", prompt):
        if int(capacity) >= attendees and all(n in equipment for n in needs):
            return name
    return "None of them."


@contextmanager
def llm_endpoint(args: argparse.Namespace) -> Iterator[agl.LLM]:
    """The LLM resource: the given endpoint, or a loopback server started for the duration."""
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY") or "dummy"
    if args.base_url:
        yield agl.LLM(endpoint=args.base_url, model=args.model, api_key=api_key)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for tests.support
    from tests.support.openai_server import OpenAITestServer

    with OpenAITestServer(loopback_responder, always_return_token_ids=True) as server:
        yield agl.LLM(endpoint=server.base_url, model=args.model, api_key=api_key)


async def debug_with_runner(llm: agl.LLM) -> None:
    """Run one rollout with `runner.step` and print what the store recorded."""
    tracer = agl.OtelTracer()
    runner: agl.LitAgentRunner[RoomTask] = agl.LitAgentRunner(tracer)
    store = agl.InMemoryLightningStore()
    with runner.run_context(agent=room_selector, store=store):
        rollout = await runner.step(TASK, resources={"main_prompt": PROMPT, "main_llm": llm})
    print(list(await store.query_rollouts()))
    spans = await store.query_spans(rollout.rollout_id)
    print("[\n" + ",\n".join(f"  {brief_span(span)}" for span in spans) + "\n]")


async def debug_with_hook(llm: agl.LLM) -> None:
    """Run one rollout with a `DebugHook` that prints the trace while it is still open."""
    tracer = agl.OtelTracer()
    runner: agl.LitAgentRunner[RoomTask] = agl.LitAgentRunner(tracer)
    store = agl.InMemoryLightningStore()
    with runner.run_context(agent=room_selector, store=store, hooks=[DebugHook()]):
        rollout = await runner.step(TASK, resources={"main_prompt": PROMPT, "main_llm": llm})
    print(f"Rollout {rollout.rollout_id} finished with status {rollout.status!r}.")


def debug_with_trainer(llm: agl.LLM) -> None:
    """Dry-run the trainer loop: `Trainer.dev` runs the Baseline, which logs each rollout as it sees it.

    Blocking (the trainer starts its own event loops and a runner process), so it is not one of `MODES`.
    """
    agl.setup_logging("INFO")
    dataset: agl.Dataset[RoomTask] = [TASK, SMALL_TASK]
    trainer = agl.Trainer(
        n_runners=1,
        tracer=agl.OtelTracer(),
        algorithm=agl.Baseline(polling_interval=0.5),
        initial_resources={"main_prompt": PROMPT, "main_llm": llm},
        port=free_port(),
    )
    trainer.dev(room_selector, dataset)


def free_port() -> int:
    """A free local port for the trainer's store server (the default, 4747, may be taken)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# Each mode takes the LLM resource; add a mode by adding an entry here.
MODES: dict[str, Callable[[agl.LLM], Coroutine[Any, Any, None]]] = {
    "runner": debug_with_runner,
    "hook": debug_with_hook,
}


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=sorted([*MODES, "trainer"]), default="runner", help="how to debug the agent")
    parser.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint (default: a loopback server)")
    parser.add_argument("--model", default="gpt-4.1-nano", help="model name sent to the endpoint")
    parser.add_argument("--api-key", default=None, help="API key (default: $OPENAI_API_KEY)")
    args = parser.parse_args(argv)
    with llm_endpoint(args) as llm:
        if args.mode == "trainer":
            debug_with_trainer(llm)
        else:
            asyncio.run(MODES[args.mode](llm))


if __name__ == "__main__":
    main()
