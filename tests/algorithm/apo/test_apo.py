"""APO end to end through `Trainer.fit`: the loopback server critiques and edits, the agent's reward reads the prompt."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any, TypedDict

import pytest

from agentlightning.adapter import TracerTraceToTriplet, TraceToMessages
from agentlightning.algorithm.apo import APO, APOReport
from agentlightning.algorithm.apo.llm import LLMCallError
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracking import TrackingConfig
from agentlightning.types import LLM, PromptTemplate
from tests.support.openai_server import OpenAITestServer
from tests.tracking.readback import mlflow_run

from .conftest import initial_resources, make_apo, make_trainer
from .scripted import EDIT_MODEL, GRADIENT_MODEL, KEYWORDS, SEED_TEMPLATE, ScriptedLLM, keyword_agent, questions


def _scores_by_round(report: APOReport) -> list[dict[str, float]]:
    return [{c.version: c.val_batch_score for c in r.candidates} for r in report.rounds]


@pytest.mark.slow
def test_fit_improves_the_prompt_end_to_end(
    server: OpenAITestServer, scripted_llm: ScriptedLLM, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report_path = tmp_path / "apo" / "report.json"
    tracking = TrackingConfig(backends=["mlflow"], dir=str(tmp_path / "tracking"))  # mlflow: dev extra
    apo = make_apo(server, report_path=report_path, show_progress=True, tracking=tracking)
    trainer = make_trainer(apo, server)
    trainer.fit(keyword_agent, questions(4), val_dataset=questions(3, "v"))

    report = APOReport.model_validate_json(report_path.read_text())
    assert report.status == "finished" and report.finished_at is not None
    assert report.resource_name == "prompt" and report.seed_version == "v0"
    assert report.seed_validation is not None and report.seed_validation.score == 0.0
    assert len(report.seed_validation.rollout_ids) == 3

    # The final prompt beats the seed, keeps its placeholder, and is what the report calls best.
    best = apo.get_best_prompt()
    best_score = apo.get_best_score()
    assert best_score is not None and best_score > report.seed_validation.score
    assert best.engine == "f-string" and "{question}" in best.template
    assert best.template == report.best_template and best_score == report.best_score
    assert best_score == pytest.approx(sum(k in best.template for k in KEYWORDS) / len(KEYWORDS))

    # Every candidate keeps the placeholder; versions are v0, v1, ... in creation order.
    assert [c.version for c in report.candidates] == [f"v{i}" for i in range(len(report.candidates))]
    assert len(report.candidates) > 1
    for candidate in report.candidates:
        assert "{question}" in candidate.template
        PromptTemplate(template=candidate.template, engine="f-string").format(question="x")
        assert candidate.round == 0 or (candidate.parent_version is not None and candidate.critique)

    assert len(report.rounds) == 2
    previous_best = report.seed_validation.score
    for record in report.rounds:
        # Parents: the beam replicated up to beam_width (2).
        assert len(record.parents) == 2
        assert len(record.branches) == 2 * 2
        for branch in record.branches:
            assert branch.gradient_batch is not None and len(branch.gradient_batch.rollout_ids) == 2
            assert branch.critique and branch.gradient_prompt and branch.edit_prompt
            assert (branch.version is None) != (branch.rejected_reason is None)
        # The beam keeps the best-scoring candidates of the round.
        kept = [c.val_batch_score for c in record.candidates if c.kept]
        dropped = [c.val_batch_score for c in record.candidates if not c.kept]
        assert 1 <= len(kept) <= 2 and set(record.beam) == {c.version for c in record.candidates if c.kept}
        assert len(record.beam) == len(kept)
        assert not dropped or min(kept) >= max(dropped)
        assert record.beam_best_version == record.beam[0]
        assert all(len(e.rollout_ids) == 3 for e in record.val_batch)
        # The best score never decreases.
        assert record.best_score is not None and record.best_score >= previous_best
        previous_best = record.best_score
    assert report.rounds[-1].best_version == report.best_version

    # Every candidate was published to the store as its own resources version, next to the LLM.
    async def stored() -> dict[str, Any]:
        found: dict[str, Any] = {}
        for candidate in report.candidates:
            update = await trainer.store.get_resources_by_id(candidate.version)
            assert update is not None
            found[candidate.version] = update.resources
        return found

    for version, resources in asyncio.run(stored()).items():
        template = next(c.template for c in report.candidates if c.version == version)
        assert resources["prompt"].template == template
        assert isinstance(resources["llm"], LLM)

    # The critic saw the agent's conversations (adapter messages), and APO's own calls are not traced.
    assert any("[assistant] The answer is 42." in text for text in scripted_llm.gradient_requests)

    async def traced_models() -> set[str]:
        models: set[str] = set()
        for rollout in await trainer.store.query_rollouts():
            for span in await trainer.store.query_spans(rollout.rollout_id):
                if "gen_ai.request.model" in span.attributes:
                    models.add(str(span.attributes["gen_ai.request.model"]))
        return models

    assert asyncio.run(traced_models()) == {"agent-model"}

    printed = capsys.readouterr().out
    assert "APO round 2" in printed
    assert f"APO best prompt: {report.best_version}" in printed

    # The per-round scores went to MLflow: the best-score curve, read back with MLflow's client.
    run = mlflow_run(tmp_path / "tracking")
    assert run["name"] == "apo" and run["params"]["beam_width"] == "2"
    assert run["history"]["best_score"] == {
        0: report.seed_validation.score,
        **{r.round: r.best_score for r in report.rounds},
    }
    assert set(run["history"]["val_batch_score_max"]) == {1, 2}


def test_rejected_edits_are_logged_with_reasons(server: OpenAITestServer, caplog: pytest.LogCaptureFixture) -> None:
    server.respond = ScriptedLLM(
        critique_script=["DROP the placeholder", "EMPTY reply please", "- add the phrase 'be concise'"]
    )
    caplog.set_level(logging.WARNING, logger="agentlightning.algorithm.apo")
    apo = make_apo(server, beam_width=1, branch_factor=3, beam_rounds=1)
    make_trainer(apo, server).fit(keyword_agent, questions(4), val_dataset=questions(3, "v"))

    branches = apo.get_report().rounds[0].branches
    reasons = sorted(b.rejected_reason for b in branches if b.rejected_reason)
    assert reasons == ["the edited prompt drops the placeholder(s) {question}", "the edited prompt is empty"]
    accepted = [b for b in branches if b.version]
    assert len(accepted) == 1 and accepted[0].version == "v1"
    assert "be concise" in apo.get_best_prompt().template
    assert "rejected an edit of v0: the edited prompt drops the placeholder(s) {question}" in caplog.text
    assert "rejected an edit of v0: the edited prompt is empty" in caplog.text


def test_llm_errors_are_retried_with_backoff(caplog: pytest.LogCaptureFixture) -> None:
    llm = ScriptedLLM(fail_first=2, fail_status=500)
    caplog.set_level(logging.WARNING, logger="agentlightning.algorithm.apo")
    with OpenAITestServer(llm) as server:
        apo = make_apo(server, beam_width=1, branch_factor=1, beam_rounds=1)
        make_trainer(apo, server).fit(keyword_agent, questions(2), val_dataset=questions(2, "v"))
    assert llm.calls[GRADIENT_MODEL] == 3 and llm.calls[EDIT_MODEL] == 1
    assert "retry 1/3" in caplog.text and "retry 2/3" in caplog.text
    assert apo.get_report().rounds[0].branches[0].version == "v1"
    assert (apo.get_best_score() or 0.0) > 0.0


def test_an_llm_that_keeps_failing_costs_the_branch_not_the_run() -> None:
    llm = ScriptedLLM(fail_first=1000, fail_status=503)
    with OpenAITestServer(llm) as server:
        apo = make_apo(server, beam_width=1, branch_factor=1, beam_rounds=1)
        make_trainer(apo, server).fit(keyword_agent, questions(2), val_dataset=questions(2, "v"))
    assert llm.calls[GRADIENT_MODEL] == 4  # first try + 3 retries
    branch = apo.get_report().rounds[0].branches[0]
    assert branch.rejected_reason is not None and "gave up after 4 attempts" in branch.rejected_reason
    assert apo.get_report().status == "finished"
    assert apo.get_best_prompt().template == SEED_TEMPLATE


def test_a_configuration_error_stops_the_run(tmp_path: Path) -> None:
    llm = ScriptedLLM(fail_first=1000, fail_status=401)
    with OpenAITestServer(llm) as server:
        apo = make_apo(server, beam_width=1, branch_factor=1, beam_rounds=1, report_path=tmp_path / "r.json")
        with pytest.raises(LLMCallError, match="AuthenticationError"):
            make_trainer(apo, server).fit(keyword_agent, questions(2), val_dataset=questions(2, "v"))
    assert llm.calls[GRADIENT_MODEL] == 1  # not retried
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["status"] == "failed" and "AuthenticationError" in report["error"]


@pytest.mark.slow
def test_a_batch_timeout_scores_stragglers_zero_and_the_run_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agentlightning.algorithm.apo")
    val = [{"question": "slow one", "slow": True}, {"question": "fast one"}]
    with OpenAITestServer(ScriptedLLM()) as server:
        apo = make_apo(
            server,
            beam_width=1,
            branch_factor=1,
            beam_rounds=1,
            val_batch_size=2,
            run_initial_validation=False,
            # Long enough for the fast task on a loaded 2-core machine; the slow one sleeps 60 s.
            rollout_batch_timeout=4.0,
        )
        # Each validation batch parks one runner on the slow task; four runners leave one free.
        make_trainer(apo, server, n_runners=4).fit(keyword_agent, questions(2), val_dataset=val)

    report = apo.get_report()
    assert report.status == "finished"
    record = report.rounds[0]
    assert [e.unfinished for e in record.val_batch] == [1, 1]
    assert record.beam_best_full_val is not None and record.beam_best_full_val.unfinished == 1
    assert "unfinished" in record.beam_best_full_val.statuses
    # v1 earns 1/3 on the fast task; the slow one counts as 0.
    assert apo.get_best_score() == pytest.approx((1 / 3) / 2)
    assert "did not finish within 4.0 s; they count as reward 0" in caplog.text


def _fingerprint(report: APOReport) -> Any:
    return {
        "candidates": [(c.version, c.parent_version, c.template) for c in report.candidates],
        "rounds": [
            {
                "parents": r.parents,
                "beam": r.beam,
                "scores": [(c.version, c.val_batch_score, c.kept) for c in r.candidates],
                "branches": [
                    (b.parent_version, b.gradient_prompt, b.edit_prompt, b.version, b.rejected_reason)
                    for b in r.branches
                ],
            }
            for r in report.rounds
        ],
        "best": (report.best_version, report.best_score),
    }


@pytest.mark.slow
def test_a_seed_makes_the_search_reproducible(server: OpenAITestServer) -> None:
    fingerprints = []
    for _ in range(2):
        apo = make_apo(server, seed=11, val_batch_size=2)
        make_trainer(apo, server).fit(keyword_agent, questions(4), val_dataset=questions(3, "v"))
        fingerprints.append(_fingerprint(apo.get_report()))
    assert fingerprints[0] == fingerprints[1]


def test_jinja_seed_prompts_stay_jinja(server: OpenAITestServer) -> None:
    apo = make_apo(server, beam_width=1, branch_factor=1, beam_rounds=1)
    resources = initial_resources(server)
    resources["prompt"] = PromptTemplate(template="Answer: {{ question }}", engine="jinja")
    make_trainer(apo, server, initial_resources=resources).fit(
        keyword_agent, questions(2), val_dataset=questions(2, "v")
    )
    best = apo.get_best_prompt()
    assert best.engine == "jinja" and "{{ question }}" in best.template and best.template != "Answer: {{ question }}"


def test_custom_meta_prompts_from_strings_and_files(
    server: OpenAITestServer, scripted_llm: ScriptedLLM, tmp_path: Path
) -> None:
    edit_file = tmp_path / "my_edit.md"
    edit_file.write_text(
        "MY EDIT\n<prompt_template>\n{{ prompt_template }}\n</prompt_template>\n<critique>\n{{ critique }}\n</critique>"
    )
    gradient = (
        "MY CRITIC for <prompt_template>\n{{ prompt_template }}\n</prompt_template>\n"
        "{% for e in experiments %}run {{ e.index }}: {{ e.reward_text }}\n{% endfor %}"
    )
    apo = make_apo(
        server,
        beam_width=1,
        branch_factor=1,
        beam_rounds=1,
        gradient_prompts=[gradient],
        apply_edit_prompt_files=[edit_file],
    )
    make_trainer(apo, server).fit(keyword_agent, questions(2), val_dataset=questions(2, "v"))
    assert scripted_llm.gradient_requests[0].startswith("MY CRITIC for")
    assert "run 1: 0.000" in scripted_llm.gradient_requests[0]
    assert scripted_llm.edit_requests[0].startswith("MY EDIT")
    branch = apo.get_report().rounds[0].branches[0]
    assert (branch.gradient_prompt, branch.edit_prompt) == ("gradient-string-0", "my_edit.md")


# ---- validation rules ----


def _bare_apo() -> APO:
    from openai import AsyncOpenAI

    return APO(AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused"), show_progress=False)


def _ready(apo: APO, resources: Any = None, adapter: Any = None) -> APO:
    apo.set_store(InMemoryLightningStore())
    if adapter is not None:
        apo.set_adapter(adapter)
    apo.set_initial_resources(
        resources if resources is not None else {"prompt": PromptTemplate(template=SEED_TEMPLATE, engine="f-string")}
    )
    return apo


async def test_a_trace_to_messages_adapter_is_required() -> None:
    with pytest.raises(ValueError, match=r"TraceToMessages adapter .* got none"):
        await _ready(_bare_apo()).run(questions(2), questions(2))
    triplets = TracerTraceToTriplet()
    with pytest.raises(
        ValueError, match=r"got TracerTraceToTriplet; pass agl.Trainer\(adapter=agl.TraceToMessages\(\)"
    ):
        await _ready(_bare_apo(), adapter=triplets).run(questions(2), questions(2))


@pytest.mark.parametrize(
    ("train", "val", "message"),
    [
        (None, questions(2), "needs a train dataset"),
        (questions(2), None, "needs a validation dataset"),
        ([], questions(2), "train dataset is empty"),
        (questions(2), [], "validation dataset is empty"),
    ],
)
async def test_train_and_val_datasets_are_required(train: Any, val: Any, message: str) -> None:
    adapter = TraceToMessages()
    with pytest.raises(ValueError, match=message):
        await _ready(_bare_apo(), adapter=adapter).run(train, val)


@pytest.mark.parametrize(
    "resources",
    [{}, {"llm": LLM(endpoint="http://127.0.0.1:9/v1", model="m")}],
)
async def test_a_prompt_template_in_the_initial_resources_is_required(resources: Any) -> None:
    adapter = TraceToMessages()
    apo = _bare_apo()
    apo.set_store(InMemoryLightningStore())
    apo.set_adapter(adapter)
    if resources:
        apo.set_initial_resources(resources)
    with pytest.raises(ValueError, match="APO needs a PromptTemplate in the initial resources"):
        await apo.run(questions(2), questions(2))


async def test_a_broken_seed_template_is_reported() -> None:
    adapter = TraceToMessages()
    apo = _ready(_bare_apo(), {"p": PromptTemplate(template="Hello {name", engine="f-string")}, adapter=adapter)
    with pytest.raises(ValueError, match="seed prompt template 'p' is not a valid f-string template"):
        await apo.run(questions(2), questions(2))


def test_the_trainer_default_adapter_is_rejected(server: OpenAITestServer) -> None:
    apo = make_apo(server)
    trainer = make_trainer(apo, server, adapter=None)
    with pytest.raises(ValueError, match="TraceToMessages adapter"):
        trainer.fit(keyword_agent, questions(2), val_dataset=questions(2, "v"))


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("beam_width", 0, "beam_width must be an integer >= 1"),
        ("branch_factor", -1, "branch_factor must be an integer >= 1"),
        ("gradient_batch_size", 0, "gradient_batch_size"),
        ("val_batch_size", 1.5, "val_batch_size"),
        ("beam_rounds", -1, "beam_rounds must be an integer >= 0"),
        ("rollout_batch_timeout", 0, "rollout_batch_timeout must be > 0"),
        ("diversity_temperature", -0.1, "diversity_temperature must be >= 0"),
        ("gradient_prompt_files", ["/nonexistent/critic.md"], "does not exist"),
        ("apply_edit_prompts", ["{% if %}"], "not a valid jinja template"),
    ],
)
def test_bad_options_are_rejected(option: str, value: Any, message: str) -> None:
    from openai import AsyncOpenAI

    with pytest.raises(ValueError, match=message):
        APO(AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused"), **{option: value})


def test_best_prompt_and_report_need_a_run() -> None:
    apo = _bare_apo()
    with pytest.raises(ValueError, match="no best prompt yet"):
        apo.get_best_prompt()
    with pytest.raises(ValueError, match="no report yet"):
        apo.get_report()
    assert apo.get_best_score() is None


def test_the_lazy_factory_builds_apo() -> None:
    from openai import AsyncOpenAI

    import agentlightning as agl

    apo = agl.APO(AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused"), beam_rounds=1)
    assert isinstance(apo, APO) and apo.beam_rounds == 1 and apo.gradient_model == "gpt-5-mini"
    assert apo.apply_edit_model == "gpt-4.1-mini" and apo.beam_width == 4 and apo.val_batch_size == 16


def test_apo_is_generic_over_the_task_type_as_in_v03() -> None:
    """v0.3 scripts write `APO[MyTask](client, ...)`; the subscripted class builds a plain APO."""

    from openai import AsyncOpenAI

    class MyTask(TypedDict):
        question: str

    algorithm = APO[MyTask](AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused"), beam_rounds=1)
    assert isinstance(algorithm, APO) and algorithm.beam_rounds == 1
