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
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from ..state import describe_state_errors

if TYPE_CHECKING:
    from gepa.core.state import GEPAState
    from gepa.strategies.batch_sampler import EpochShuffledBatchSampler

__all__ = [
    "encode",
    "decode",
    "check_saved_search",
    "state_to_json",
    "state_from_json",
    "search_rng_to_json",
    "search_rng_from_json",
]

_EXCLUDED = {"_budget_hooks"}  # callbacks gepa registers at run time
#: Deepest nesting a saved state may have (gepa's own is a few levels; a tampered one must not recurse away).
MAX_DEPTH = 100

Finite = Annotated[float, Field(allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]
Word = Annotated[int, Field(ge=0, le=2**32 - 1)]  # one word of the Mersenne Twister's state


def _as_tuple(value: Any) -> Any:
    """JSON keeps the generator's state tuple as a list."""
    return tuple(value) if isinstance(value, list) else value  # pyright: ignore[reportUnknownArgumentType]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class _SavedRng(_Strict):
    rng: Annotated[
        tuple[Literal[3], Annotated[list[Word], Field(min_length=625, max_length=625)], Optional[Finite]],
        BeforeValidator(_as_tuple),
    ]
    sampler: dict[str, Any]


class _SavedSampler(_Strict):
    shuffled_ids: list[Any]
    epoch: int
    id_freqs: dict[Any, Count]
    last_trainset_size: Count


class _SavedUsage(_Strict):
    calls: Count
    failed_calls: Count
    input_tokens: Count
    output_tokens: Count
    estimated_tokens: Count
    dollars: Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _SavedSearch(_Strict):
    """What `SearchRecorder` saves after each iteration."""

    iteration: Count
    gepa: dict[str, Any]
    search: _SavedRng
    reflection: _SavedUsage


class _SavedGepaState(BaseModel):
    """The fields of gepa's `GEPAState` a resumed search reads first; other fields are kept as they are."""

    model_config = ConfigDict(strict=True, extra="allow")

    validation_schema_version: int
    program_candidates: Annotated[list[dict[str, str]], Field(min_length=1)]
    parent_program_for_candidate: list[list[Optional[Count]]]
    prog_candidate_val_subscores: list[dict[Any, float]]
    named_predictor_id_to_update_next_for_program_candidate: list[Count]
    num_metric_calls_by_discovery: list[Count]
    pareto_front_valset: dict[Any, float]
    program_at_pareto_front_valset: dict[Any, set[Count]]
    i: Annotated[int, Field(ge=-1)]


def _invalid(detail: str) -> ValueError:
    return ValueError(f"the saved GEPA state is invalid: {detail}; pass resume=False to start over")


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


def decode(value: Any, field: str = "state") -> Any:
    """The inverse of `encode`; ValueError naming `field` for what `encode` never writes (or past `MAX_DEPTH`)."""
    try:
        return _decode(value, MAX_DEPTH)
    except RecursionError:
        raise _invalid(f"{field} nests deeper than {MAX_DEPTH} levels") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise _invalid(f"{field} holds a value encode() never writes ({type(exc).__name__}: {exc})") from None


def _decode(value: Any, depth: int) -> Any:
    if depth < 0:
        raise RecursionError
    if isinstance(value, list):
        return [_decode(item, depth - 1) for item in value]  # pyright: ignore[reportUnknownVariableType]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:  # pyright: ignore[reportUnknownArgumentType]
        ((tag, inner),) = value.items()  # pyright: ignore[reportUnknownVariableType]
        if tag == "$float":
            if not isinstance(inner, str) or inner not in ("inf", "-inf", "nan"):
                raise ValueError(f"$float holds {inner!r}, not 'inf', '-inf' or 'nan'")
            return float(inner)
        if tag in ("$set", "$tuple", "$items") and not isinstance(inner, list):
            raise TypeError(f"{tag} holds a {type(inner).__name__}, not a list")  # pyright: ignore[reportUnknownArgumentType]
        if tag == "$set":
            return {_decode(item, depth - 1) for item in inner}  # pyright: ignore[reportUnknownVariableType]
        if tag == "$tuple":
            return tuple(_decode(item, depth - 1) for item in inner)  # pyright: ignore[reportUnknownVariableType]
        if tag == "$items":
            return {_decode(key, depth - 1): _decode(item, depth - 1) for key, item in inner}  # pyright: ignore[reportUnknownVariableType]
    return {key: _decode(item, depth - 1) for key, item in value.items()}  # pyright: ignore[reportUnknownVariableType]


def check_saved_search(saved: Any) -> dict[str, Any]:
    """The search state GEPA saved (`iteration`, `gepa`, `search`, `reflection`), checked before anything uses it.

    ValueError naming the field when a value is missing, of the wrong type or out of range.
    """
    try:
        _SavedSearch.model_validate(saved)
        _SavedSampler.model_validate(decode(saved["search"]["sampler"], "search.sampler"))
    except ValidationError as exc:
        raise _invalid(describe_state_errors(exc)) from None
    if saved["search"]["rng"][1][-1] > 624:
        raise _invalid(f"search.rng[1][624]: position {saved['search']['rng'][1][-1]} is past the 624 words")
    return saved


def state_to_json(state: GEPAState) -> dict[str, Any]:
    return encode({key: item for key, item in state.__dict__.items() if key not in _EXCLUDED})


def state_from_json(data: dict[str, Any]) -> GEPAState:
    """Rebuild a `GEPAState`; ValueError when it was written by another gepa state layout or is inconsistent."""
    from gepa.core.state import GEPAState

    fields = decode(data, "gepa")
    if not isinstance(fields, dict):
        raise _invalid(f"gepa holds a {type(fields).__name__}, not the fields of a GEPAState")  # pyright: ignore[reportUnknownArgumentType]
    version = fields.get("validation_schema_version")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    if version != GEPAState._VALIDATION_SCHEMA_VERSION:  # pyright: ignore[reportPrivateUsage]
        raise ValueError(
            f"the saved GEPA state has gepa schema version {version!r}, the installed gepa reads "
            f"{GEPAState._VALIDATION_SCHEMA_VERSION}; resume with the gepa version that wrote it, or pass resume=False"  # pyright: ignore[reportPrivateUsage]
        )
    try:
        checked = _SavedGepaState.model_validate(fields)
    except ValidationError as exc:
        raise _invalid(describe_state_errors(exc, prefix="gepa")) from None
    candidates = len(checked.program_candidates)
    parents = [p for ps in checked.parent_program_for_candidate for p in ps if p is not None]
    fronts = [p for ps in checked.program_at_pareto_front_valset.values() for p in ps]
    if any(p >= candidates for p in parents + fronts):
        raise _invalid(f"gepa: a parent or Pareto-front program index is past the {candidates} candidates")
    state = GEPAState.__new__(GEPAState)
    state.__dict__.update(fields)  # pyright: ignore[reportUnknownArgumentType]
    try:
        state.is_consistent()
    except (AssertionError, AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
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
    saved = decode(data["sampler"], "search.sampler")
    sampler.shuffled_ids = list(saved["shuffled_ids"])
    sampler.epoch = int(saved["epoch"])
    sampler.id_freqs = Counter(saved["id_freqs"])
    sampler.last_trainset_size = int(saved["last_trainset_size"])
