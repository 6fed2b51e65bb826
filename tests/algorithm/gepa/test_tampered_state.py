"""A tampered GEPA resume state is refused on load with a ValueError naming the field (never a bare
TypeError, KeyError or RecursionError from deep inside the decoder or gepa)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

import pytest

from agentlightning.algorithm.gepa.persistence import check_saved_search, state_from_json
from agentlightning.algorithm.state import load_algorithm_state, save_algorithm_state
from agentlightning.store.memory import InMemoryLightningStore
from tests.support.openai_server import OpenAITestServer

from .scripted import ScriptedReflection
from .test_gepa import fit, make_gepa

State = dict[str, Any]


@pytest.fixture(scope="module")
def saved() -> State:
    """The state a real two-iteration search saved."""
    store = InMemoryLightningStore()
    with OpenAITestServer(ScriptedReflection()) as server:
        fit(make_gepa(server, max_iterations=2), server, store)
    state = asyncio.run(load_algorithm_state(store, algorithm="gepa", run="gepa"))
    assert state is not None
    return state


def _at(path: str, value: Any) -> Callable[[State], None]:
    def mutate(state: State) -> None:
        *parents, last = path.split(".")
        target: Any = state
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if isinstance(target, list):
            target[int(last)] = value
        elif value is _DELETE:
            del target[last]
        else:
            target[last] = value

    return mutate


_DELETE = object()


def _deep(levels: int) -> Any:
    value: Any = []
    for _ in range(levels):
        value = [value]
    return value


def _candidates(state: State) -> int:
    return len(state["gepa"]["program_candidates"])


def _front_index_past_the_end(state: State) -> None:
    front = state["gepa"]["program_at_pareto_front_valset"]
    past = {"$set": [_candidates(state) + 5]}
    if "$items" in front:  # keys that are not strings: a list of [key, programs]
        front["$items"][0][1] = past
    else:
        front[next(iter(front))] = past


def _parents_past_the_end(state: State) -> None:
    state["gepa"]["parent_program_for_candidate"] = [[99]] * _candidates(state)


MUTATIONS: list[tuple[str, Callable[[State], None], str]] = [
    ("iteration as text", _at("iteration", "2"), "iteration: Input should be a valid integer"),
    ("negative iteration", _at("iteration", -3), "iteration: Input should be greater than or equal to 0"),
    ("missing reflection", _at("reflection", _DELETE), "reflection: Field required"),
    ("negative reflection calls", _at("reflection.calls", -1), "reflection.calls: Input should be greater"),
    ("NaN dollars", _at("reflection.dollars", float("nan")), "reflection.dollars: Input should be a finite number"),
    ("gepa state is a list", _at("gepa", []), "gepa: Input should be a valid dictionary"),
    ("short generator state", _at("search.rng", [3, [1], None]), r"search.rng\[1\]: List should have at least 625"),
    ("sampler set of a number", _at("search.sampler.shuffled_ids", {"$set": 5}), "search.sampler holds a value"),
    ("sampler epoch as text", _at("search.sampler.epoch", "x"), "epoch: Input should be a valid integer"),
    ("no candidates", _at("gepa.program_candidates", []), "gepa.program_candidates: List should have at least 1"),
    ("candidate text a number", _at("gepa.program_candidates.0", {"prompt": 5}), r"program_candidates\[0\].prompt"),
    ("iteration counter as text", _at("gepa.i", "x"), "gepa.i: Input should be a valid integer"),
    ("parent index past the end", _parents_past_the_end, "a parent or Pareto-front program index is past"),
    ("front index past the end", _front_index_past_the_end, "a parent or Pareto-front program index is past"),
    ("tag of another value", _at("gepa.full_program_trace", {"$float": "1e999x"}), "gepa holds a value encode()"),
    ("items of a number", _at("gepa.pareto_front_valset", {"$items": 7}), "gepa holds a value encode()"),
    ("nested 5000 deep", _at("gepa.full_program_trace", _deep(5000)), "gepa nests deeper than 100 levels"),
    ("unknown schema version", _at("gepa.validation_schema_version", 99), "gepa schema version 99"),
]


@pytest.mark.parametrize(("mutate", "named"), [m[1:] for m in MUTATIONS], ids=[m[0] for m in MUTATIONS])
def test_a_tampered_field_is_refused_naming_it(saved: State, mutate: Callable[[State], None], named: str) -> None:
    state = copy.deepcopy(saved)
    state_from_json(check_saved_search(state)["gepa"])  # the untampered state reads back
    mutate(state)
    with pytest.raises(ValueError, match=named) as caught:
        state_from_json(check_saved_search(state)["gepa"])
    assert "resume=False" in str(caught.value)


def test_a_tampered_state_in_the_store_stops_the_resumed_run_before_any_rollout(saved: State) -> None:
    store = InMemoryLightningStore()
    state = copy.deepcopy(saved)
    state["search"]["rng"] = "tampered"
    asyncio.run(save_algorithm_state(store, algorithm="gepa", run="gepa", state=state))
    with OpenAITestServer(ScriptedReflection()) as server:
        with pytest.raises(ValueError, match="search.rng: Input should be a valid tuple"):
            fit(make_gepa(server, max_iterations=3), server, store)
    assert list(asyncio.run(store.query_rollouts())) == []
