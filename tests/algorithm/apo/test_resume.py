"""APO resumes from the store: a run killed mid-search continues after its last completed round."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentlightning.algorithm.apo.llm import LLMCallError
from agentlightning.algorithm.state import load_algorithm_state
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import PromptTemplate
from tests.support.openai_server import ErrorReply, OpenAITestServer, ReplyLike

from .conftest import initial_resources, make_apo
from .conftest import make_trainer as make_apo_trainer
from .scripted import GRADIENT_MODEL, ScriptedLLM, keyword_agent, questions

TRAIN, VAL = questions(4), questions(3, "v")


def make_trainer(apo: Any, server: OpenAITestServer, **overrides: Any) -> Any:
    strategy = {"type": "shm", "main_thread": "algorithm", "n_runners": 2, "graceful_delay": 0.2}
    return make_apo_trainer(apo, server, **{"strategy": strategy, **overrides})


class CrashingCritic(ScriptedLLM):
    """A scripted LLM whose critic answers 401 (a fatal error: the run stops) after `healthy` critiques."""

    def __init__(self, healthy: int) -> None:
        super().__init__()
        self.healthy = healthy

    def __call__(self, request: dict[str, Any]) -> ReplyLike:
        if request.get("model") == GRADIENT_MODEL and self.calls[GRADIENT_MODEL] >= self.healthy:
            self.calls[GRADIENT_MODEL] += 1
            return ErrorReply(status_code=401, message="key revoked mid-run")
        return super().__call__(request)


def _rollouts_by_resources(store: InMemoryLightningStore) -> dict[str, int]:
    async def count() -> dict[str, int]:
        found: dict[str, int] = {}
        for rollout in await store.query_rollouts():
            found[str(rollout.resources_id)] = found.get(str(rollout.resources_id), 0) + 1
        return found

    return asyncio.run(count())


def test_a_killed_search_continues_after_its_last_completed_round() -> None:
    store = InMemoryLightningStore()
    options: dict[str, Any] = {"beam_width": 1, "branch_factor": 1, "beam_rounds": 3}
    with OpenAITestServer(CrashingCritic(healthy=1)) as server:
        apo = make_apo(server, **options)
        with pytest.raises(LLMCallError, match="AuthenticationError"):
            make_trainer(apo, server, store=store).fit(keyword_agent, TRAIN, val_dataset=VAL)
    killed = apo.get_report()
    assert killed.status == "failed" and len(killed.rounds) == 2  # round 2 died in its critique
    saved = asyncio.run(load_algorithm_state(store, algorithm="apo", run="apo"))
    assert saved is not None and saved["completed_rounds"] == 1
    before = _rollouts_by_resources(store)

    with OpenAITestServer(ScriptedLLM()) as server:
        resumed = make_apo(server, **options)
        trainer = make_trainer(resumed, server, store=store)
        trainer.fit(keyword_agent, TRAIN, val_dataset=VAL)
    report = resumed.get_report()
    assert report.status == "finished" and len(report.resumed_at) == 1
    # Round 1 is kept as it was; rounds 2 and 3 ran after the restart, round 2 from its start.
    assert [r.round for r in report.rounds] == [1, 2, 3]
    assert report.rounds[0] == saved_round_one(saved)
    # No work is repeated: the seed is not validated again, versions go on where they stopped.
    new_rollouts = sum(_rollouts_by_resources(store).values()) - sum(before.values())
    assert new_rollouts == sum(_rollouts_of_round(r) for r in report.rounds[1:])
    versions = [c.version for c in report.candidates]
    assert versions == [f"v{i}" for i in range(len(versions))]
    assert saved["best_score"] is not None and report.best_score is not None
    assert report.best_score >= saved["best_score"]
    # The best prompt is published as `apo-best`, the latest bundle, and handed to a next stage.
    latest = asyncio.run(store.get_latest_resources())
    assert latest is not None and latest.resources_id == "apo-best"
    assert latest.resources["prompt"] == resumed.get_best_prompt()
    result = resumed.get_result_resources()
    assert result is not None and result["prompt"] == resumed.get_best_prompt() and "llm" in result


def _rollouts_of_round(record: Any) -> int:
    gradient = sum(len(b.gradient_batch.rollout_ids) for b in record.branches if b.gradient_batch)
    val = sum(len(e.rollout_ids) for e in record.val_batch)
    full = len(record.beam_best_full_val.rollout_ids) if record.beam_best_full_val else 0
    return gradient + val + full


def saved_round_one(saved: dict[str, Any]) -> Any:
    from agentlightning.algorithm.apo import APOReport

    return APOReport.model_validate(saved["report"]).rounds[0]


def test_a_finished_search_is_not_run_again_unless_asked() -> None:
    store = InMemoryLightningStore()
    with OpenAITestServer(ScriptedLLM()) as server:
        first = make_apo(server, beam_width=1, branch_factor=1, beam_rounds=1)
        make_trainer(first, server, store=store).fit(keyword_agent, TRAIN, val_dataset=VAL)
        rollouts = sum(_rollouts_by_resources(store).values())

        again = make_apo(server, beam_width=1, branch_factor=1, beam_rounds=1)
        make_trainer(again, server, store=store).fit(keyword_agent, TRAIN, val_dataset=VAL)
        assert sum(_rollouts_by_resources(store).values()) == rollouts  # nothing ran
        assert again.get_best_prompt() == first.get_best_prompt()
        assert again.get_best_score() == first.get_best_score()

        # One more round continues the finished search; resume=False starts a new one from v0.
        longer = make_apo(server, beam_width=1, branch_factor=1, beam_rounds=2)
        make_trainer(longer, server, store=store).fit(keyword_agent, TRAIN, val_dataset=VAL)
        assert [r.round for r in longer.get_report().rounds] == [1, 2]
        fresh = make_apo(server, beam_width=1, branch_factor=1, beam_rounds=1, resume=False)
        make_trainer(fresh, server, store=store).fit(keyword_agent, TRAIN, val_dataset=VAL)
        assert fresh.get_report().resumed_at == [] and len(fresh.get_report().rounds) == 1


def test_another_seed_prompt_under_the_same_run_name_is_refused() -> None:
    store = InMemoryLightningStore()
    with OpenAITestServer(ScriptedLLM()) as server:
        apo = make_apo(server, beam_width=1, branch_factor=1, beam_rounds=0)
        make_trainer(apo, server, store=store).fit(keyword_agent, TRAIN, val_dataset=VAL)
        other = make_apo(server, beam_rounds=0)
        resources = {**initial_resources(server), "prompt": PromptTemplate(template="New seed: {question}")}
        with pytest.raises(ValueError, match="another seed prompt; pass run_name"):
            make_trainer(other, server, store=store, initial_resources=resources).fit(
                keyword_agent, TRAIN, val_dataset=VAL
            )
        separate = make_apo(server, beam_rounds=0, run_name="apo-2")
        make_trainer(separate, server, store=store, initial_resources=resources).fit(
            keyword_agent, TRAIN, val_dataset=VAL
        )
        assert separate.get_best_prompt().template == "New seed: {question}"
