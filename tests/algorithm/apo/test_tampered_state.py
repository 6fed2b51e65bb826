"""A tampered APO resume state in the store is refused on load with a ValueError naming the field."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

import pytest

from agentlightning.algorithm.apo.resume import parse_search_state
from agentlightning.algorithm.state import load_algorithm_state, save_algorithm_state
from agentlightning.store.memory import InMemoryLightningStore
from tests.support.openai_server import OpenAITestServer

from .conftest import make_apo
from .scripted import ScriptedLLM, keyword_agent
from .test_resume import TRAIN, VAL, make_trainer

State = dict[str, Any]


@pytest.fixture(scope="module")
def saved() -> State:
    """The state a real one-round search saved."""
    store = InMemoryLightningStore()
    with OpenAITestServer(ScriptedLLM()) as server:
        apo = make_apo(server, beam_width=1, branch_factor=1, beam_rounds=1)
        make_trainer(apo, server, store=store).fit(keyword_agent, TRAIN, val_dataset=VAL)
    state = asyncio.run(load_algorithm_state(store, algorithm="apo", run="apo"))
    assert state is not None
    return state


def _set(key: str, value: Any) -> Callable[[State], None]:
    return lambda state: state.__setitem__(key, value)


def _rng_word(state: State) -> None:
    state["rng"][1][3] = 2**40


def _duplicate_candidate(state: State) -> None:
    state["report"]["candidates"].append(state["report"]["candidates"][0])


MUTATIONS: list[tuple[str, Callable[[State], None], str]] = [
    ("beam names an unknown version", _set("beam", ["v99"]), r"beam: \['v99'\] are not candidates"),
    ("empty beam", _set("beam", []), "beam: List should have at least 1 item"),
    ("beam of numbers", _set("beam", [5]), r"beam\[0\]: Input should be a valid string"),
    ("beam repeats a version", _set("beam", ["v0", "v0"]), "beam: a version appears twice"),
    ("unknown best version", _set("best_version", "v42"), "best_version: 'v42' is not a candidate"),
    ("next version taken", _set("next_version", 1), "next_version: 1 is already taken"),
    ("next version as text", _set("next_version", "3"), "next_version: Input should be a valid integer"),
    ("next version as bool", _set("next_version", True), "next_version: Input should be a valid integer"),
    ("negative completed rounds", _set("completed_rounds", -1), "completed_rounds: Input should be greater"),
    ("NaN full validation score", _set("full_val_scores", {"v0": float("nan")}), "full_val_scores.v0"),
    ("score of an unknown version", _set("full_val_scores", {"v77": 0.5}), "full_val_scores: scores of versions"),
    ("best score as text", _set("best_score", "0.9"), "best_score: Input should be a valid number"),
    ("short generator state", _set("rng", [3, [1, 2, 3], None]), r"rng\[1\]: List should have at least 625"),
    ("generator word too large", _rng_word, r"rng\[1\]\[3\]: Input should be less than or equal to 4294967295"),
    ("generator gauss as text", lambda state: state["rng"].__setitem__(2, "x"), r"rng\[2\]: Input should be"),
    ("no generator state", _set("rng", None), "rng: Input should be a valid tuple"),
    ("report is not an object", _set("report", "nope"), "report: Input should be a valid dictionary"),
    ("report repeats a candidate", _duplicate_candidate, "report.candidates: a version appears twice"),
    ("unknown field", _set("surprise", 1), "surprise: Extra inputs are not permitted"),
]


@pytest.mark.parametrize(("mutate", "named"), [m[1:] for m in MUTATIONS], ids=[m[0] for m in MUTATIONS])
def test_a_tampered_field_is_refused_naming_it(saved: State, mutate: Callable[[State], None], named: str) -> None:
    state = copy.deepcopy(saved)
    parse_search_state(state)  # the untampered state reads back
    mutate(state)
    with pytest.raises(ValueError, match=named) as caught:
        parse_search_state(state)
    assert "pass resume=False to start over" in str(caught.value)


def test_a_tampered_state_in_the_store_stops_the_resumed_run_with_the_field(
    saved: State,
) -> None:
    store = InMemoryLightningStore()
    state = copy.deepcopy(saved)
    state["beam"] = ["v99"]
    asyncio.run(save_algorithm_state(store, algorithm="apo", run="apo", state=state))
    with OpenAITestServer(ScriptedLLM()) as server:
        apo = make_apo(server, beam_width=1, branch_factor=1, beam_rounds=2)
        with pytest.raises(ValueError, match="beam: \\['v99'\\] are not candidates"):
            make_trainer(apo, server, store=store).fit(keyword_agent, TRAIN, val_dataset=VAL)
