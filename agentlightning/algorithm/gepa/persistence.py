"""GEPA's search state as JSON, so it can live in the store (`algorithm/state.py`) and a killed run resumes.

What is kept: gepa's own `GEPAState` (candidates, parents, per-example validation scores, the Pareto front,
iteration and budget counters; pickled by gepa into its run directory, kept here as tagged JSON, never
pickle: the store is reachable over HTTP), the random generator and minibatch sampler the search draws
from, and the reflection model's spending. On resume the state is written back into a fresh gepa run
directory with gepa's own `GEPAState.save`, so gepa resumes through its own code path.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gepa.core.state import GEPAState
    from gepa.strategies.batch_sampler import EpochShuffledBatchSampler

__all__ = ["encode", "decode", "state_to_json", "state_from_json", "search_rng_to_json", "search_rng_from_json"]

_EXCLUDED = {"_budget_hooks"}  # callbacks gepa registers at run time


def encode(value: Any) -> Any:
    """Plain JSON for what gepa keeps: sets, tuples, int-keyed dicts and infinite floats get tagged."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, (set, frozenset)):
        return {"$set": [encode(item) for item in sorted(value, key=repr)]}  # pyright: ignore[reportUnknownArgumentType, reportUnknownVariableType]
    if isinstance(value, tuple):
        return {"$tuple": [encode(item) for item in value]}  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, list):
        return [encode(item) for item in value]  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, dict):
        items: list[tuple[Any, Any]] = list(value.items())  # pyright: ignore[reportUnknownArgumentType, reportUnknownMemberType]
        if all(isinstance(key, str) and not key.startswith("$") for key, _ in items):
            return {key: encode(item) for key, item in items}
        return {"$items": [[encode(key), encode(item)] for key, item in items]}
    raise TypeError(f"cannot keep a {type(value).__name__} of the GEPA state in the store: {value!r:.80}")


def decode(value: Any) -> Any:
    """The inverse of `encode`."""
    if isinstance(value, list):
        return [decode(item) for item in value]  # pyright: ignore[reportUnknownVariableType]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:  # pyright: ignore[reportUnknownArgumentType]
        ((tag, inner),) = value.items()  # pyright: ignore[reportUnknownVariableType]
        if tag == "$float":
            return float(inner)  # pyright: ignore[reportUnknownArgumentType]
        if tag == "$set":
            return {decode(item) for item in inner}  # pyright: ignore[reportUnknownVariableType]
        if tag == "$tuple":
            return tuple(decode(item) for item in inner)  # pyright: ignore[reportUnknownVariableType]
        if tag == "$items":
            return {decode(key): decode(item) for key, item in inner}  # pyright: ignore[reportUnknownVariableType]
    return {key: decode(item) for key, item in value.items()}  # pyright: ignore[reportUnknownVariableType]


def state_to_json(state: GEPAState) -> dict[str, Any]:
    return encode({key: item for key, item in state.__dict__.items() if key not in _EXCLUDED})


def state_from_json(data: dict[str, Any]) -> GEPAState:
    """Rebuild a `GEPAState`; ValueError when it was written by another gepa state layout or is inconsistent."""
    from gepa.core.state import GEPAState

    fields = decode(data)
    version = fields.get("validation_schema_version")
    if version != GEPAState._VALIDATION_SCHEMA_VERSION:  # pyright: ignore[reportPrivateUsage]
        raise ValueError(
            f"the saved GEPA state has gepa schema version {version!r}, the installed gepa reads "
            f"{GEPAState._VALIDATION_SCHEMA_VERSION}; resume with the gepa version that wrote it, or pass resume=False"  # pyright: ignore[reportPrivateUsage]
        )
    state = GEPAState.__new__(GEPAState)
    state.__dict__.update(fields)
    try:
        state.is_consistent()
    except (AssertionError, AttributeError, TypeError) as exc:
        raise ValueError(f"the saved GEPA state is inconsistent ({exc!r}); pass resume=False to start over") from exc
    return state


def search_rng_to_json(rng: random.Random, sampler: EpochShuffledBatchSampler) -> dict[str, Any]:
    """The random generator the candidate selector and the sampler share, and the sampler's epoch."""
    version, internal, gauss = rng.getstate()
    return {
        "rng": [version, list(internal), gauss],
        "sampler": encode(
            {
                "shuffled_ids": list(sampler.shuffled_ids),
                "epoch": sampler.epoch,
                "id_freqs": dict(sampler.id_freqs),
                "last_trainset_size": sampler.last_trainset_size,
            }
        ),
    }


def search_rng_from_json(data: dict[str, Any], rng: random.Random, sampler: EpochShuffledBatchSampler) -> None:
    version, internal, gauss = data["rng"]
    rng.setstate((int(version), tuple(int(x) for x in internal), gauss))
    saved = decode(data["sampler"])
    sampler.shuffled_ids = list(saved["shuffled_ids"])
    sampler.epoch = int(saved["epoch"])
    sampler.id_freqs = Counter(saved["id_freqs"])
    sampler.last_trainset_size = int(saved["last_trainset_size"])
