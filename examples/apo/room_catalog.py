"""The meeting rooms of a small office and their bookings for one week: the world the room selector lives in.

Shared by the agent (`room_selector.py`, whose tool reads it) and the grader (`room_selector_grader.py`,
which knows the right answer). Times are "HH:MM" on a 24-hour clock; a booking "09:00-10:30" blocks
any meeting that overlaps it.
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = ["Room", "ROOMS", "BOOKINGS", "DATES", "minutes", "is_free", "rooms_for_slot"]


class Room(TypedDict):
    id: str
    name: str
    capacity: int
    floor: int
    equipment: list[str]
    accessible: bool


ROOMS: list[Room] = [
    {"id": "A101", "name": "Aster", "capacity": 4, "floor": 1, "equipment": ["whiteboard"], "accessible": True},
    {"id": "A102", "name": "Birch", "capacity": 6, "floor": 1, "equipment": ["tv", "whiteboard"], "accessible": True},
    {"id": "A103", "name": "Clover", "capacity": 2, "floor": 1, "equipment": ["video_conference"], "accessible": True},
    {
        "id": "B201",
        "name": "Cedar",
        "capacity": 8,
        "floor": 2,
        "equipment": ["projector", "whiteboard"],
        "accessible": False,
    },
    {
        "id": "B202",
        "name": "Dogwood",
        "capacity": 10,
        "floor": 2,
        "equipment": ["video_conference", "tv"],
        "accessible": True,
    },
    {"id": "B203", "name": "Ginkgo", "capacity": 4, "floor": 2, "equipment": ["video_conference"], "accessible": False},
    {
        "id": "C301",
        "name": "Elm",
        "capacity": 14,
        "floor": 3,
        "equipment": ["projector", "video_conference", "whiteboard"],
        "accessible": True,
    },
    {
        "id": "C302",
        "name": "Fir",
        "capacity": 20,
        "floor": 3,
        "equipment": ["projector", "video_conference"],
        "accessible": False,
    },
    {
        "id": "D401",
        "name": "Hazel",
        "capacity": 30,
        "floor": 4,
        "equipment": ["projector", "video_conference", "whiteboard", "tv"],
        "accessible": True,
    },
]

DATES = ["2025-06-02", "2025-06-03", "2025-06-04", "2025-06-05", "2025-06-06"]

# room id -> date -> booked intervals
BOOKINGS: dict[str, dict[str, list[str]]] = {
    "A101": {
        "2025-06-02": ["09:00-10:00", "13:00-14:30"],
        "2025-06-03": ["10:00-12:00"],
        "2025-06-05": ["08:30-09:30", "15:00-16:00"],
    },
    "A102": {
        "2025-06-02": ["09:30-11:00"],
        "2025-06-04": ["13:00-17:00"],
        "2025-06-06": ["10:00-10:30"],
    },
    "A103": {"2025-06-03": ["09:00-09:30", "14:00-15:00"], "2025-06-05": ["11:00-12:00"]},
    "B201": {
        "2025-06-02": ["14:00-16:00"],
        "2025-06-03": ["09:00-11:00"],
        "2025-06-04": ["10:00-11:30"],
        "2025-06-06": ["13:00-15:00"],
    },
    "B202": {
        "2025-06-02": ["10:00-12:00"],
        "2025-06-03": ["13:30-15:00"],
        "2025-06-05": ["09:00-10:00", "14:00-17:00"],
    },
    "B203": {"2025-06-04": ["09:00-12:00"], "2025-06-06": ["15:00-16:30"]},
    "C301": {
        "2025-06-02": ["15:00-17:00"],
        "2025-06-03": ["10:00-11:00"],
        "2025-06-04": ["09:00-10:00"],
        "2025-06-06": ["09:00-12:00"],
    },
    "C302": {"2025-06-03": ["13:00-17:00"], "2025-06-05": ["10:00-11:30"]},
    "D401": {"2025-06-02": ["11:00-12:00"], "2025-06-04": ["14:00-16:00"], "2025-06-06": ["09:00-17:00"]},
}


def minutes(clock: str) -> int:
    """'09:30' -> 570."""
    hours, _, mins = clock.strip().partition(":")
    return int(hours) * 60 + int(mins or 0)


def is_free(room_id: str, date: str, time: str, duration_min: int) -> bool:
    """Whether the room has no booking overlapping [time, time + duration) on that date."""
    start = minutes(time)
    end = start + int(duration_min)
    for interval in BOOKINGS.get(room_id, {}).get(date, []):
        booked_start, _, booked_end = interval.partition("-")
        if start < minutes(booked_end) and minutes(booked_start) < end:
            return False
    return True


def rooms_for_slot(date: str, time: str, duration_min: int) -> list[dict[str, Any]]:
    """Every room with its details, whether it is free for the slot, and that day's bookings."""
    return [
        {
            **room,
            "free": is_free(room["id"], date, time, duration_min),
            "booked": BOOKINGS.get(room["id"], {}).get(date, []),
        }
        for room in ROOMS
    ]
