"""Search state kept in the store, so a prompt optimizer killed mid-run resumes where it stopped.

An algorithm saves a JSON-serializable dict as an `AlgorithmState` resource, in a resources bundle of its
own (`<run>-state`), after every completed round; on start it reads it back. The store's "latest
resources" pointer moves to every bundle written, so each save is followed by re-publishing a usable
bundle (the best prompt found so far, next to the other resources): the latest resources stay ones an
agent can run with.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import ValidationError

from agentlightning.store.base import LightningStore
from agentlightning.types import AlgorithmState, NamedResources

__all__ = [
    "check_run_name",
    "describe_state_errors",
    "state_resources_id",
    "load_algorithm_state",
    "save_algorithm_state",
]

_STATE_NAME = "state"


def check_run_name(run: Any) -> str:
    """The run name, or ValueError: it prefixes resources ids, so it must be a non-empty string."""
    if not isinstance(run, str) or not run.strip():
        raise ValueError(f"run_name must be a non-empty string, got {run!r}")
    return run


def describe_state_errors(exc: ValidationError, limit: int = 3, prefix: str = "") -> str:
    """The first problems of a saved state that failed validation, each naming its field (`rng[1][3]: ...`)."""
    parts: list[str] = []
    for error in exc.errors()[:limit]:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in (prefix, *error["loc"]) if p != "")
        where = where.lstrip(".")
        value = error.get("input")
        shown = f" (got {value!r})" if not isinstance(value, (dict, list)) and len(repr(value)) <= 60 else ""
        parts.append(f"{where or 'state'}: {error['msg']}{shown}")
    return "; ".join(parts)


def state_resources_id(run: str) -> str:
    """The id of the bundle holding the state of `run`."""
    return f"{run}-state"


async def load_algorithm_state(store: LightningStore, *, algorithm: str, run: str) -> Optional[dict[str, Any]]:
    """The state `algorithm` saved for `run`, or None when there is none.

    Raises ValueError when the bundle exists but holds another algorithm's state (two algorithms given the
    same run name would overwrite each other's progress).
    """
    update = await store.get_resources_by_id(state_resources_id(run))
    if update is None:
        return None
    saved = update.resources.get(_STATE_NAME)
    if not isinstance(saved, AlgorithmState):
        raise ValueError(
            f"resources {state_resources_id(run)!r} do not hold an algorithm state; pick another run name than {run!r}"
        )
    if saved.algorithm != algorithm or saved.run != run:
        raise ValueError(
            f"resources {state_resources_id(run)!r} hold the state of {saved.algorithm} run {saved.run!r}, not "
            f"{algorithm} run {run!r}; give each algorithm of a store its own run name"
        )
    return dict(saved.state)


async def save_algorithm_state(
    store: LightningStore,
    *,
    algorithm: str,
    run: str,
    state: dict[str, Any],
    publish_after: Optional[tuple[str, NamedResources]] = None,
) -> None:
    """Save `state`, then publish `publish_after` (resources id, resources) so that it is the latest bundle."""
    record = AlgorithmState(algorithm=algorithm, run=run, state=state)
    await store.update_resources(state_resources_id(run), {_STATE_NAME: record})
    if publish_after is not None:
        await store.update_resources(publish_after[0], publish_after[1])
