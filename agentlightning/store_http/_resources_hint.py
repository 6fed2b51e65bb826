"""Resources versions sent along with a dequeue, so a runner does not re-fetch resources it already has.

A runner reads the resources of every rollout it claims (`get_resources_by_id`, or `get_latest_resources`
when the rollout names none): one HTTP round trip per rollout for data that changes once per training
step. A client that asks for it (request header `X-AGL-Want-Resources-Versions`) gets, with each non-empty
dequeue answer, a header naming the current version of every resources bundle the claimed rollouts refer
to, and of the latest bundle when one of them names none. The client keeps recently read bundles; while
the task that dequeued sends no other request, its resources reads are answered from that cache when the
versions match - exactly what a read at dequeue time would have returned. The hint lives in a context
variable, so only that task (and tasks it starts meanwhile) sees it, and any request it sends drops it:
nothing the task observes afterwards can be older than what it already saw.
"""

from __future__ import annotations

import contextvars
import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Optional, Union

from agentlightning.store.base import LightningStore
from agentlightning.types import ResourcesUpdate, Rollout

__all__ = [
    "WANT_RESOURCES_VERSIONS_HEADER",
    "RESOURCES_VERSIONS_HEADER",
    "ResourcesHints",
    "resources_versions_header",
]

WANT_RESOURCES_VERSIONS_HEADER = "X-AGL-Want-Resources-Versions"
RESOURCES_VERSIONS_HEADER = "X-AGL-Resources-Versions"

# A bundle's identity: (resources_id, version, update_time). The update time tells apart bundles that a
# restarted server re-created under the same id and version.
_Key = tuple[str, int, float]
_Hint = dict[str, Any]

# (owner token, hint) of the task's latest dequeue; set and read in the task that called dequeue.
_current_hint: contextvars.ContextVar[Optional[tuple[object, _Hint]]] = contextvars.ContextVar(
    "agentlightning_resources_hint", default=None
)


def _key_of(update: Optional[ResourcesUpdate]) -> Optional[list[Union[str, int, float]]]:
    return None if update is None else [update.resources_id, update.version, update.update_time]


async def resources_versions_header(store: LightningStore, rollouts: Sequence[Rollout]) -> str:
    """Header value for a dequeue answer: `{"latest": key|null, "by_id": {id: key|null}}` (key: id, version, time).

    "latest" is present only when some rollout names no resources (the runner then reads the latest).
    """
    hint: _Hint = {}
    if any(r.resources_id is None for r in rollouts):
        hint["latest"] = _key_of(await store.get_latest_resources())
    by_id: dict[str, Any] = {}
    for resources_id in dict.fromkeys(r.resources_id for r in rollouts if r.resources_id is not None):
        by_id[resources_id] = _key_of(await store.get_resources_by_id(resources_id))
    hint["by_id"] = by_id
    return json.dumps(hint, separators=(",", ":"))


def _parse_key(value: Any) -> Optional[_Key]:
    if isinstance(value, list) and len(value) == 3:  # type: ignore[arg-type]
        resources_id, version, update_time = value  # type: ignore[misc]
        if isinstance(resources_id, str) and isinstance(version, int) and isinstance(update_time, (int, float)):
            return (resources_id, version, float(update_time))
    return None


class ResourcesHints:
    """A client's cache of resources bundles (raw JSON bodies) plus the hint of the current task's dequeue."""

    def __init__(self, capacity: int = 32) -> None:
        self._token = object()
        self._capacity = capacity
        self._bodies: OrderedDict[str, tuple[_Key, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def drop() -> None:
        """Forget the current task's hint (called before every request the task sends)."""
        if _current_hint.get() is not None:
            _current_hint.set(None)

    def remember(self, header: Optional[str]) -> None:
        """Keep the versions a dequeue answer reported, for the current task's next resources reads."""
        if not header:
            return
        try:
            hint = json.loads(header)
        except ValueError:
            return
        if isinstance(hint, dict):
            _current_hint.set((self._token, hint))  # type: ignore[arg-type]

    def _hint(self) -> Optional[_Hint]:
        current = _current_hint.get()
        return current[1] if current is not None and current[0] is self._token else None

    def _cached(self, key: Optional[_Key]) -> Optional[bytes]:
        if key is None:
            return None
        with self._lock:
            entry = self._bodies.get(key[0])
        return entry[1] if entry is not None and entry[0] == key else None

    def latest(self) -> tuple[bool, Optional[bytes]]:
        """(known, body): whether the hint settles `get_latest_resources`, and the cached answer (None: none)."""
        hint = self._hint()
        if hint is None or "latest" not in hint:
            return False, None
        if hint["latest"] is None:
            return True, None
        body = self._cached(_parse_key(hint["latest"]))
        return body is not None, body

    def by_id(self, resources_id: str) -> Optional[bytes]:
        """The cached body of `resources_id` when the hint says it is still the current version."""
        hint = self._hint()
        by_id = hint.get("by_id") if hint is not None else None
        if not isinstance(by_id, dict) or resources_id not in by_id:
            return None
        return self._cached(_parse_key(by_id[resources_id]))

    def keep(self, update: ResourcesUpdate, body: bytes) -> None:
        """Cache a bundle just read from the server (the oldest one goes when the cache is full)."""
        with self._lock:
            self._bodies[update.resources_id] = ((update.resources_id, update.version, update.update_time), body)
            self._bodies.move_to_end(update.resources_id)
            while len(self._bodies) > self._capacity:
                self._bodies.popitem(last=False)
