"""Grade the room selector's answer: 1.0 for the best room, 0.5 for a room that works but is not the best, else 0.

"Best" is the office policy the seed prompt does not spell out (APO has to discover it from the rewards):
among rooms that are free for the whole meeting, seat everyone, have all requested equipment and are
wheelchair accessible when asked, pick the smallest one; on a tie the lower floor, then the lower id.
When no room qualifies, the right answer is "none".

The agent's answer should contain `final_choice: <ROOM_ID>` (or `final_choice: none`); if that line is
missing, a single room id mentioned in the answer is taken as the choice.

Check the dataset against the policy: `python room_selector_grader.py` (prints any task whose
`expected_choice` disagrees with `best_room`).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Optional, TypedDict

from room_catalog import ROOMS, Room, is_free

__all__ = ["RoomTask", "room_fits", "best_room", "parse_choice", "grade", "NONE"]

NONE = "none"
_FINAL_CHOICE = re.compile(r"final[_ ]choice\s*[:=]\s*[*`\"']*\s*([A-Za-z]\d{3}|none)\b", re.IGNORECASE)
_ROOM_IDS = {room["id"] for room in ROOMS}


class RoomTask(TypedDict):
    id: str
    date: str
    time: str
    duration_min: int
    attendees: int
    needs: list[str]
    accessible_required: bool
    expected_choice: str


def room_fits(room: Room, task: RoomTask) -> bool:
    """Free for the slot, big enough, equipped, and accessible when required."""
    return (
        room["capacity"] >= task["attendees"]
        and all(need in room["equipment"] for need in task["needs"])
        and (room["accessible"] or not task["accessible_required"])
        and is_free(room["id"], task["date"], task["time"], task["duration_min"])
    )


def best_room(task: RoomTask) -> str:
    """The room the policy picks for the task, or "none"."""
    fitting = [room for room in ROOMS if room_fits(room, task)]
    if not fitting:
        return NONE
    return min(fitting, key=lambda room: (room["capacity"], room["floor"], room["id"]))["id"]


def parse_choice(answer: str) -> Optional[str]:
    """The room id (upper case) or "none" the answer settles on, or None when it does not say."""
    matches = _FINAL_CHOICE.findall(answer or "")
    if matches:
        choice = matches[-1]
        return NONE if choice.lower() == NONE else choice.upper()
    mentioned = {room_id for room_id in _ROOM_IDS if re.search(rf"\b{room_id}\b", answer or "", re.IGNORECASE)}
    return mentioned.pop() if len(mentioned) == 1 else None


def grade(task: RoomTask, answer: str) -> float:
    """1.0 for the policy's room, 0.5 for another room that fits, 0.0 otherwise."""
    choice = parse_choice(answer)
    expected = task["expected_choice"]
    if choice is None:
        return 0.0
    if choice.lower() == expected.lower():
        return 1.0
    room = next((r for r in ROOMS if r["id"] == choice), None)
    return 0.5 if room is not None and room_fits(room, task) else 0.0


def load_tasks(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


if __name__ == "__main__":
    tasks = load_tasks(Path(__file__).with_name("room_tasks.jsonl"))
    wrong = [t for t in tasks if t["expected_choice"] != best_room(t)]  # type: ignore[arg-type]
    for task in wrong:
        print(f"{task['id']}: expected {task['expected_choice']}, policy says {best_room(task)}")  # type: ignore[arg-type]
    print(f"{len(tasks)} tasks, {len(wrong)} disagree with the policy")
    sys.exit(1 if wrong else 0)
