"""The room selector: an agent that books meeting rooms with function calling, and the prompt APO tunes.

The agent fills its `PromptTemplate` with the meeting request, lets the model look up rooms with the
`get_rooms_and_availability` tool (capacity, floor, equipment, accessibility and whether each room is free
for the slot), and reads the model's final answer (`final_choice: <ROOM_ID>`). The grader
(`room_selector_grader.py`) turns that into the reward the agent returns: 1.0 for the room the office
policy picks, 0.5 for another room that works, 0.0 otherwise. The seed prompt below does not state the
policy (smallest fitting room, then lowest floor), which is what `room_selector_apo.py` lets APO find.

Try the agent on a few tasks with the seed prompt (any OpenAI-compatible endpoint):

    export OPENAI_API_KEY=sk-...            # or OPENAI_BASE_URL=http://localhost:8000/v1 for a local server
    python examples/apo/room_selector.py --model gpt-4.1-nano --limit 3

What to expect: for each task, the tool calls the model made, its final answer, the expected room and
the reward; then the mean reward.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any, Optional

from openai import AsyncOpenAI
from room_catalog import rooms_for_slot
from room_selector_grader import RoomTask, grade

import agentlightning as agl

__all__ = ["SEED_PROMPT", "TOOLS", "room_selector", "load_room_tasks", "run_room_selection", "TASKS_PATH"]

TASKS_PATH = Path(__file__).with_name("room_tasks.jsonl")
MAX_TURNS = 5

SEED_PROMPT = agl.PromptTemplate(
    template=(
        "You help employees book a meeting room.\n"
        "Date: {date}\n"
        "Start time: {time}\n"
        "Duration: {duration_min} minutes\n"
        "Attendees: {attendees}\n"
        "Equipment needed: {needs}\n"
        "Wheelchair-accessible room required: {accessible_required}\n"
        "Look up the rooms, pick a suitable one, and end your answer with `final_choice: <ROOM_ID>` "
        "(or `final_choice: none` if no room works)."
    ),
    engine="f-string",
)

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_rooms_and_availability",
            "description": (
                "List every meeting room with its capacity, floor, equipment and accessibility, whether it is "
                "free for the whole requested slot, and its bookings that day."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "date": {"type": "string", "description": "YYYY-MM-DD"},
                    "time": {"type": "string", "description": "start time, HH:MM (24-hour)"},
                    "duration_min": {"type": "integer", "description": "meeting length in minutes"},
                },
                "required": ["date", "time", "duration_min"],
            },
        },
    }
]


def load_room_tasks(path: Path = TASKS_PATH) -> list[RoomTask]:
    """The tasks of `room_tasks.jsonl`, one meeting request per line."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _call_tool(name: str, arguments: str) -> str:
    if name != "get_rooms_and_availability":
        return json.dumps({"error": f"unknown tool {name!r}"})
    try:
        args = json.loads(arguments or "{}")
        return json.dumps(rooms_for_slot(str(args["date"]), str(args["time"]), int(args["duration_min"])))
    except (KeyError, TypeError, ValueError) as exc:
        return json.dumps({"error": f"bad arguments {arguments!r}: {exc}; pass date, time and duration_min"})


def _render(task: RoomTask, prompt_template: agl.PromptTemplate) -> str:
    return prompt_template.format(
        date=task["date"],
        time=task["time"],
        duration_min=task["duration_min"],
        attendees=task["attendees"],
        needs=", ".join(task["needs"]) or "none",
        accessible_required="yes" if task["accessible_required"] else "no",
    )


async def run_room_selection(
    task: RoomTask, prompt_template: agl.PromptTemplate, llm: agl.LLM
) -> tuple[str, list[Any]]:
    """Talk to the model until it answers without calling a tool; returns (final answer, messages)."""
    client = AsyncOpenAI(
        base_url=llm.endpoint, api_key=llm.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY", max_retries=3
    )
    messages: list[Any] = [{"role": "user", "content": _render(task, prompt_template)}]
    answer = ""
    for _ in range(MAX_TURNS):
        response = await client.chat.completions.create(
            model=llm.model,
            messages=messages,
            tools=TOOLS,
            **llm.sampling_parameters,  # type: ignore[arg-type]
        )
        message = response.choices[0].message
        answer = message.content or ""
        if not message.tool_calls:
            break
        # Only function tools exist here; other kinds of tool calls are ignored.
        calls = [(call.id, f) for call in message.tool_calls if (f := getattr(call, "function", None)) is not None]
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": f.name, "arguments": f.arguments}}
                    for call_id, f in calls
                ],
            }
        )
        for call_id, function in calls:
            result = _call_tool(function.name, function.arguments)
            messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
    return answer, messages


@agl.rollout
async def room_selector(task: RoomTask, prompt_template: agl.PromptTemplate, llm: agl.LLM) -> float:
    """One booking conversation; the reward is the grader's score of the final answer."""
    answer, _ = await run_room_selection(task, prompt_template, llm)
    return grade(task, answer)


async def _try(model: str, base_url: Optional[str], limit: int) -> None:
    llm = agl.LLM(endpoint=base_url or "https://api.openai.com/v1", model=model)
    rewards: list[float] = []
    for task in load_room_tasks()[:limit]:
        answer, messages = await run_room_selection(task, SEED_PROMPT, llm)
        reward = grade(task, answer)
        rewards.append(reward)
        calls = [m for m in messages if isinstance(m, dict) and m.get("role") == "tool"]
        print(f"{task['id']}: {len(calls)} tool call(s); answer: {answer.strip()!r}")
        print(f"  expected {task['expected_choice']}, reward {reward}")
    print(f"mean reward over {len(rewards)} tasks: {sum(rewards) / max(len(rewards), 1):.3f}")


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=os.environ.get("APO_AGENT_MODEL", "gpt-4.1-nano"))
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"))
    parser.add_argument("--limit", type=int, default=3, help="number of tasks to try")
    args = parser.parse_args(argv)
    asyncio.run(_try(args.model, args.base_url, args.limit))


if __name__ == "__main__":
    main()
