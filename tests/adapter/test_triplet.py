"""TracerTraceToTriplet: one triplet per LLM call, rewards matched, nothing dropped without a reason."""

from __future__ import annotations

import json
import logging

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentlightning.adapter import Adapter, TracerTraceToTriplet
from agentlightning.adapter.triplet import RewardMatchPolicy, TraceTree
from agentlightning.instrumentation.openai import request_to_attributes, response_to_attributes
from agentlightning.types import Attributes, Span

from .span_factory import SpanFactory, assert_accounted

SYSTEM = {"role": "system", "content": "You are terse."}
USER = {"role": "user", "content": "What is 2+2?"}


def two_turn_rollout(f: SpanFactory) -> list[Span]:
    agent = f.agent("solver", start=0, end=20)
    turn1 = f.openai_call(
        [SYSTEM, USER],
        "4",
        response_id="chatcmpl-a",
        prompt_ids=[1, 2, 3],
        response_ids=[4, 5],
        logprobs=[{"token": "4", "logprob": -0.1, "bytes": None, "top_logprobs": []}],
        parent=agent,
        start=1,
        end=2,
    )
    turn2 = f.openai_call(
        [SYSTEM, USER, {"role": "assistant", "content": "4"}, {"role": "user", "content": "Sure?"}],
        "Yes",
        response_id="chatcmpl-b",
        prompt_ids=[1, 2, 3, 4, 5, 6],
        response_ids=[7],
        parent=agent,
        start=3,
        end=4,
    )
    reward = f.reward(1.0, parent=agent, start=5, end=5)
    return [agent, turn1, turn2, reward]


def test_triplets_from_our_openai_instrumentation():
    adapter = TracerTraceToTriplet()
    triplets = adapter.adapt(two_turn_rollout(SpanFactory()))
    assert len(triplets) == 2
    first, second = triplets
    assert first.prompt["token_ids"] == [1, 2, 3]
    assert first.response["token_ids"] == [4, 5]
    assert first.prompt["raw_content"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
    ]
    assert first.response["raw_content"] == [{"role": "assistant", "content": "4", "finish_reason": "stop"}]
    assert first.response["logprobs"]["content"][0]["logprob"] == -0.1
    assert first.prompt["image_urls"] == []
    assert first.reward is None
    assert first.metadata["response_id"] == "chatcmpl-a"
    assert first.metadata["agent_name"] == "solver"
    assert first.metadata["request"]["model"] == "test-model"
    assert first.metadata["request"]["temperature"] == 0.5
    assert first.metadata["response"]["model"] == "test-model"
    assert first.metadata["usage"] == {"prompt_tokens": 3, "completion_tokens": 2}
    assert second.prompt["token_ids"] == [1, 2, 3, 4, 5, 6]
    assert second.response["token_ids"] == [7]
    assert "logprobs" not in second.response
    assert second.reward == 1.0
    report = adapter.last_report
    assert report is not None
    assert report.n_triplets == 2 and report.n_reward_spans == 1
    assert report.dropped == [] and report.unmatched_rewards == [] and report.token_drift == []
    assert_accounted(report)


def test_adapter_is_callable_and_accepts_opentelemetry_spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    request = {"model": "m", "messages": [USER]}
    response = {
        "id": "chatcmpl-otel",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"}, "token_ids": [9]}],
        "prompt_token_ids": [8],
    }
    with tracer.start_as_current_span("agent", attributes={"agent.name": "otel-agent"}):
        with tracer.start_as_current_span("openai.chat.completion") as span:
            span.set_attributes({**request_to_attributes(request), **response_to_attributes(response)})
    adapter = TracerTraceToTriplet()
    assert isinstance(adapter, Adapter)
    triplets = adapter(list(exporter.get_finished_spans()))
    assert len(triplets) == 1
    assert triplets[0].prompt["token_ids"] == [8]
    assert triplets[0].response["token_ids"] == [9]
    assert triplets[0].metadata["agent_name"] == "otel-agent"


def test_empty_input_gives_empty_result_and_report():
    adapter = TracerTraceToTriplet()
    assert adapter.adapt([]) == []
    assert adapter.last_report is not None and adapter.last_report.n_spans == 0


def test_first_occurrence_vs_first_sibling():
    f = SpanFactory()
    agent = f.agent("a", start=0, end=20)
    step = f.span("step", parent=agent, start=1, end=5)
    call = f.openai_call([USER], response_id="r1", prompt_ids=[1], response_ids=[2], parent=step, start=2, end=3)
    reward = f.reward(0.5, parent=agent, start=6, end=6)
    spans = [agent, step, call, reward]

    occurrence = TracerTraceToTriplet(reward_match=RewardMatchPolicy.FIRST_OCCURRENCE)
    assert [t.reward for t in occurrence.adapt(spans)] == [0.5]

    sibling = TracerTraceToTriplet(reward_match=RewardMatchPolicy.FIRST_SIBLING)
    assert [t.reward for t in sibling.adapt(spans)] == [None]
    assert sibling.last_report is not None
    assert [u.span_id for u in sibling.last_report.unmatched_rewards] == [reward.span_id]

    # A reward next to the call (same parent) is matched by FIRST_SIBLING.
    sibling_reward = f.reward(0.7, parent=step, start=4, end=4)
    assert [t.reward for t in sibling.adapt(spans[:3] + [sibling_reward])] == [0.7]


def test_first_occurrence_rewards_go_to_latest_unrewarded_call_that_ended_before():
    f = SpanFactory()
    agent = f.agent("a", start=0, end=30)
    c1 = f.openai_call([USER], response_id="r1", prompt_ids=[1], response_ids=[2], parent=agent, start=1, end=2)
    c2 = f.openai_call([USER], response_id="r2", prompt_ids=[1], response_ids=[2], parent=agent, start=3, end=10)
    r1 = f.reward(0.1, parent=agent, start=5, end=5)  # c2 still running: goes to c1
    r2 = f.reward(0.2, parent=agent, start=11, end=11)  # goes to c2
    r3 = f.reward(0.3, parent=agent, start=12, end=12)  # nothing left
    adapter = TracerTraceToTriplet()
    triplets = adapter.adapt([agent, c1, c2, r1, r2, r3])
    assert [t.reward for t in triplets] == [0.1, 0.2]
    assert adapter.last_report is not None
    assert [u.value for u in adapter.last_report.unmatched_rewards] == [0.3]
    assert adapter.last_report.n_reward_spans == 3


def test_a_reward_stamped_just_before_its_calls_late_recorded_end_still_goes_to_that_call():
    """Node.js's OpenAI instrumentation ends a call's span in a callback that can run just after the agent
    resumed and emitted its reward: a few milliseconds of slack keep the reward on that call."""
    f = SpanFactory()
    agent = f.agent("a", start=0, end=30)
    c1 = f.openai_call([USER], response_id="r1", prompt_ids=[1], response_ids=[2], parent=agent, start=1, end=2)
    c2 = f.openai_call([USER], response_id="r2", prompt_ids=[1], response_ids=[2], parent=agent, start=3, end=10.003)
    reward = f.reward(1.0, parent=agent, start=10.001, end=10.002)
    triplets = TracerTraceToTriplet().adapt([agent, c1, c2, reward])
    assert [t.reward for t in triplets] == [None, 1.0]


def test_multi_dimensional_reward_kept_in_metadata():
    from agentlightning.emitter.reward import emit_reward

    f = SpanFactory()
    call = f.openai_call([USER], prompt_ids=[1], response_ids=[2], start=1, end=2)
    core = emit_reward({"task": 1.0, "format": 0.5}, primary_key="task", propagate=False)
    reward = f.span(core.name, dict(core.attributes), start=3, end=3)
    (triplet,) = TracerTraceToTriplet().adapt([call, reward])
    assert triplet.reward == 1.0
    assert triplet.metadata["rewards"] == {"task": 1.0, "format": 0.5}


def test_legacy_agentops_reward_payload():
    f = SpanFactory()
    call = f.openai_call([USER], prompt_ids=[1], response_ids=[2], start=1, end=2)
    legacy = f.span("reward_fn", {"agentops.task.output": json.dumps({"type": "reward", "value": 0.25})}, start=3)
    (triplet,) = TracerTraceToTriplet().adapt([call, legacy])
    assert triplet.reward == 0.25


def test_to_trajectory_final_reward_overrides_last():
    f = SpanFactory()
    tree = TraceTree.from_spans(two_turn_rollout(f))
    triplets = tree.to_trajectory(final_reward=3.0)
    assert [t.reward for t in triplets] == [None, 3.0]


def test_same_response_id_from_two_tracers_is_one_triplet_with_merged_data():
    f = SpanFactory()
    agent = f.agent("a", start=0, end=10)
    # e.g. AgentOps and our instrumentation both traced the call, in separate traces.
    without_ids = f.openai_call([USER], "4", response_id="chatcmpl-x", parent=agent, start=1, end=3)
    with_ids = f.openai_call(
        [USER], "4", response_id="chatcmpl-x", prompt_ids=[1, 2], response_ids=[3], start=1.5, end=2.5
    )
    adapter = TracerTraceToTriplet(repair_hierarchy=False)
    triplets = adapter.adapt([agent, without_ids, with_ids])
    assert len(triplets) == 1
    assert triplets[0].prompt["token_ids"] == [1, 2]
    assert triplets[0].response["token_ids"] == [3]
    report = adapter.last_report
    assert report is not None
    assert [(d.span_id, d.reason, d.merged_into) for d in report.dropped] == [
        (with_ids.span_id, "duplicate", without_ids.span_id)
    ]
    assert report.lost_llm_calls == []
    assert_accounted(report)


def test_span_stored_twice_is_reported_as_duplicate():
    f = SpanFactory()
    call = f.openai_call([USER], prompt_ids=[1], response_ids=[2])
    adapter = TracerTraceToTriplet()
    assert len(adapter.adapt([call, call.model_copy()])) == 1
    assert adapter.last_report is not None
    assert [d.reason for d in adapter.last_report.dropped] == ["duplicate"]
    assert_accounted(adapter.last_report)


def test_agentops_langchain_span_around_openai_span_is_one_call():
    f = SpanFactory()
    agent = f.span("agent.agent", {"agentops.span.kind": "agent", "operation.name": "math-agent"}, start=0, end=10)
    outer = f.agentops_langchain_chat([USER], ["4"], parent=agent, start=1, end=5)
    inner = f.openai_call(
        [USER], "4", response_id="chatcmpl-in", prompt_ids=[5, 6], response_ids=[7], parent=outer, start=2, end=4
    )
    adapter = TracerTraceToTriplet()
    (triplet,) = adapter.adapt([agent, outer, inner])
    assert triplet.metadata["span_id"] == outer.span_id
    assert triplet.metadata["merged_span_ids"] == [inner.span_id]
    assert triplet.metadata["agent_name"] == "math-agent"
    assert triplet.metadata["response_id"] == "chatcmpl-in"
    assert triplet.prompt["token_ids"] == [5, 6] and triplet.response["token_ids"] == [7]
    # Content comes from the span that carries token ids (the OpenAI span): exact wire messages.
    assert triplet.prompt["raw_content"] == [USER]
    report = adapter.last_report
    assert report is not None
    assert [(d.reason, d.merged_into) for d in report.dropped] == [("nested_llm_call", outer.span_id)]
    assert_accounted(report)


def test_agentops_langchain_span_alone_is_recognised():
    f = SpanFactory()
    span = f.agentops_langchain_chat([SYSTEM, USER], ["4"])
    adapter = TracerTraceToTriplet()
    (triplet,) = adapter.adapt([span])
    assert triplet.prompt["raw_content"] == [
        {"content": "You are terse.", "role": "system"},
        {"content": "What is 2+2?", "role": "user"},
    ]
    assert triplet.response["raw_content"] == ["4"]
    assert triplet.prompt["token_ids"] == [] and triplet.response["token_ids"] == []
    assert adapter.last_report is not None and adapter.last_report.n_triplets_without_token_ids == 1


def test_langchain_structured_output_spans_are_recognised_by_attributes():
    f = SpanFactory()
    # `with_structured_output` runs a RunnableSequence whose chat-model span is not named like an OpenAI call.
    sequence = f.span("RunnableSequence", {"openinference.span.kind": "CHAIN"}, start=0, end=10)
    chat = f.openinference_chat([USER], '{"answer": 4}', parent=sequence, start=1, end=5)
    parser = f.span("PydanticToolsParser", {"openinference.span.kind": "CHAIN"}, parent=sequence, start=6, end=7)
    openllmetry = f.openllmetry_langchain_chat([USER], "4", name="RunnableSequence.task", start=11, end=12)
    adapter = TracerTraceToTriplet()
    triplets = adapter.adapt([sequence, chat, parser, openllmetry])
    assert len(triplets) == 2
    assert triplets[0].prompt["raw_content"] == [{"role": "user", "content": "What is 2+2?"}]
    assert triplets[0].response["raw_content"] == [{"role": "assistant", "content": '{"answer": 4}'}]
    assert triplets[1].metadata["span_name"] == "RunnableSequence.task"
    assert_accounted(adapter.last_report)


def test_floating_openai_span_is_repaired_under_langchain_span_and_merged():
    f = SpanFactory()
    agent = f.agent("a", start=0, end=10)
    chat = f.openllmetry_langchain_chat([USER], "4", parent=agent, start=1, end=5)
    floating = f.openai_call([USER], "4", response_id="chatcmpl-f", prompt_ids=[1], response_ids=[2], start=2, end=4)
    adapter = TracerTraceToTriplet()
    (triplet,) = adapter.adapt([agent, chat, floating])
    assert triplet.metadata["agent_name"] == "a"
    assert triplet.prompt["token_ids"] == [1]
    without_repair = TracerTraceToTriplet(repair_hierarchy=False)
    assert len(without_repair.adapt([agent, chat, floating])) == 2


def test_two_calls_under_one_wrapper_stay_two_triplets():
    f = SpanFactory()
    wrapper = f.openllmetry_langchain_chat([USER], "4", start=0, end=10)
    c1 = f.openai_call([USER], response_id="r1", prompt_ids=[1], response_ids=[2], parent=wrapper, start=1, end=2)
    c2 = f.openai_call([USER], response_id="r2", prompt_ids=[3], response_ids=[4], parent=wrapper, start=3, end=4)
    adapter = TracerTraceToTriplet()
    triplets = adapter.adapt([wrapper, c1, c2])
    assert [t.prompt["token_ids"] for t in triplets] == [[1], [3]]
    assert_accounted(adapter.last_report)


def test_two_generations_without_response_ids_under_one_wrapper_stay_two_triplets():
    f = SpanFactory()
    wrapper = f.agentops_langchain_chat([USER], ["4"], start=0, end=10)
    c1 = f.openai_call([USER], response_id=None, prompt_ids=[1], response_ids=[2], parent=wrapper, start=1, end=2)
    c2 = f.openai_call([USER], response_id=None, prompt_ids=[3], response_ids=[4], parent=wrapper, start=3, end=4)
    adapter = TracerTraceToTriplet()
    triplets = adapter.adapt([wrapper, c1, c2])
    assert [t.prompt["token_ids"] for t in triplets] == [[1], [3]]
    assert [t.metadata["span_id"] for t in triplets] == [wrapper.span_id, c2.span_id]
    assert_accounted(adapter.last_report)


def test_agent_match_keeps_only_matching_agents():
    f = SpanFactory()
    root = f.span("session", start=0, end=30)
    planner = f.agent("planner", parent=root, start=1, end=10)
    p_call = f.openai_call([USER], response_id="p", prompt_ids=[1], response_ids=[2], parent=planner, start=2, end=3)
    coder = f.agent("coder", parent=root, start=11, end=20)
    c_call = f.openai_call([USER], response_id="c", prompt_ids=[3], response_ids=[4], parent=coder, start=12, end=13)
    outside = f.openai_call([USER], response_id="o", prompt_ids=[5], response_ids=[6], parent=root, start=21, end=22)
    adapter = TracerTraceToTriplet(agent_match=r"^coder$")
    triplets = adapter.adapt([root, planner, p_call, coder, c_call, outside])
    assert [t.metadata["response_id"] for t in triplets] == ["c"]
    assert triplets[0].metadata["agent_name"] == "coder"
    report = adapter.last_report
    assert report is not None
    assert {d.span_id: d.reason for d in report.dropped} == {
        p_call.span_id: "agent_filtered",
        outside.span_id: "agent_filtered",
    }
    assert "planner" in next(d.detail for d in report.dropped if d.span_id == p_call.span_id)
    assert_accounted(report)


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({"agent.name": "n1"}, "n1"),
        ({"agentops.span.kind": "agent", "operation.name": "n2"}, "n2"),
        ({"recipient_agent_type": "n3"}, "n3"),
        ({"langchain.chain.type": "n4"}, "n4"),
        ({"executor.id": "n5"}, "n5"),
        ({"type": "agent", "agentlightning.operation.input.name": "n6"}, "n6"),
    ],
)
def test_agent_name_detection(attributes: Attributes, expected: str):
    f = SpanFactory()
    agent = f.span("some-agent", attributes, start=0, end=10)
    call = f.openai_call([USER], prompt_ids=[1], response_ids=[2], parent=agent, start=1, end=2)
    (triplet,) = TracerTraceToTriplet(agent_match=expected).adapt([agent, call])
    assert triplet.metadata["agent_name"] == expected


def test_llm_call_inside_reward_span_is_excluded_by_default():
    f = SpanFactory()
    agent = f.agent("a", start=0, end=20)
    call = f.openai_call([USER], response_id="policy", prompt_ids=[1], response_ids=[2], parent=agent, start=1, end=2)
    judge = f.span(
        "judge", {"agentops.task.output": json.dumps({"type": "reward", "value": 0.9})}, parent=agent, start=3, end=8
    )
    judge_call = f.openai_call(
        [USER], response_id="judge", prompt_ids=[9], response_ids=[9], parent=judge, start=4, end=5
    )
    spans = [agent, call, judge, judge_call]

    adapter = TracerTraceToTriplet()
    (triplet,) = adapter.adapt(spans)
    assert triplet.metadata["response_id"] == "policy"
    assert triplet.reward == 0.9
    assert adapter.last_report is not None
    assert [(d.span_id, d.reason) for d in adapter.last_report.dropped] == [(judge_call.span_id, "inside_reward_span")]

    keep = TracerTraceToTriplet(exclude_llm_call_in_reward=False)
    assert [t.metadata["response_id"] for t in keep.adapt(spans)] == ["policy", "judge"]


def test_custom_llm_call_match_reports_unmatched_llm_spans_and_warns(caplog: pytest.LogCaptureFixture):
    f = SpanFactory()
    chat = f.openllmetry_langchain_chat([USER], "4", start=0, end=1)
    adapter = TracerTraceToTriplet(llm_call_match=r"openai\.chat\.completion")
    with caplog.at_level(logging.WARNING, logger="agentlightning.adapter.triplet"):
        assert adapter.adapt([chat]) == []
    report = adapter.last_report
    assert report is not None
    assert [(d.reason, d.span_id) for d in report.dropped] == [("name_not_matched", chat.span_id)]
    assert "zero triplets" in caplog.text and "name_not_matched" in caplog.text and "ro-1" in caplog.text
    assert report.warnings and "name_not_matched" in report.warnings[0]
    assert_accounted(report)
    # Opting back into attribute detection recognises it.
    assert len(TracerTraceToTriplet(llm_call_match="nothing", detect_llm_calls_by_attributes=True).adapt([chat])) == 1


def test_custom_llm_call_match_merges_nested_unmatched_spans():
    f = SpanFactory()
    outer = f.span("my_llm_wrapper", start=0, end=10)
    inner = f.openai_call([USER], prompt_ids=[1], response_ids=[2], parent=outer, start=1, end=2)
    adapter = TracerTraceToTriplet(llm_call_match=r"^my_llm_wrapper$")
    (triplet,) = adapter.adapt([outer, inner])
    assert triplet.prompt["token_ids"] == [1]
    assert adapter.last_report is not None
    assert [d.reason for d in adapter.last_report.dropped] == ["nested_llm_call"]


def test_skip_empty_token_spans_reports_no_token_ids():
    f = SpanFactory()
    with_ids = f.openai_call([USER], response_id="r1", prompt_ids=[1], response_ids=[2], start=0, end=1)
    without = f.openai_call([USER], response_id="r2", start=2, end=3)
    reward = f.reward(1.0, start=4, end=4)
    adapter = TracerTraceToTriplet(_skip_empty_token_spans=True)
    (triplet,) = adapter.adapt([with_ids, without, reward])
    assert triplet.metadata["response_id"] == "r1"
    assert triplet.reward == 1.0  # the reward goes to the trainable call
    report = adapter.last_report
    assert report is not None
    assert [(d.span_id, d.reason) for d in report.dropped] == [(without.span_id, "no_token_ids")]
    assert_accounted(report)

    kept = TracerTraceToTriplet()
    assert len(kept.adapt([with_ids, without])) == 2
    assert kept.last_report is not None and kept.last_report.n_triplets_without_token_ids == 1


def test_skip_empty_token_spans_reclassifies_merged_members():
    f = SpanFactory()
    outer = f.openllmetry_langchain_chat([USER], "4", start=0, end=10)
    inner = f.openai_call([USER], "4", response_id="r", parent=outer, start=1, end=2)
    adapter = TracerTraceToTriplet(_skip_empty_token_spans=True)
    assert adapter.adapt([outer, inner]) == []
    report = adapter.last_report
    assert report is not None
    assert sorted(d.reason for d in report.dropped) == ["no_token_ids", "no_token_ids"]
    assert_accounted(report)


def test_zero_triplet_warning_lists_each_reason(caplog: pytest.LogCaptureFixture):
    f = SpanFactory()
    judge = f.span("judge", {"agentops.task.output": json.dumps({"type": "reward", "value": 1})}, start=0, end=5)
    judge_call = f.openai_call([USER], response_id="j", parent=judge, start=1, end=2)
    with caplog.at_level(logging.WARNING):
        assert TracerTraceToTriplet().adapt([judge, judge_call]) == []
    assert "1 LLM span(s) but zero triplets" in caplog.text
    assert "inside_reward_span" in caplog.text


def test_no_warning_when_rollout_has_no_llm_calls(caplog: pytest.LogCaptureFixture):
    f = SpanFactory()
    with caplog.at_level(logging.WARNING):
        assert TracerTraceToTriplet().adapt([f.span("tool"), f.reward(1.0)]) == []
    assert caplog.text == ""


def test_token_drift_is_reported():
    f = SpanFactory()
    agent = f.agent("a", start=0, end=20)
    t1 = f.openai_call([USER], response_id="1", prompt_ids=[1, 2], response_ids=[3], parent=agent, start=1, end=2)
    t2 = f.openai_call([USER], response_id="2", prompt_ids=[1, 2, 3, 4], response_ids=[5], parent=agent, start=3, end=4)
    t3 = f.openai_call(
        [USER], response_id="3", prompt_ids=[1, 2, 9, 4, 5, 6], response_ids=[7], parent=agent, start=5, end=6
    )
    adapter = TracerTraceToTriplet()
    adapter.adapt([agent, t1, t2, t3])
    report = adapter.last_report
    assert report is not None
    assert [(d.turn, d.previous_turn, d.mismatch_index, d.span_id) for d in report.token_drift] == [
        (2, 1, 2, t3.span_id)
    ]
    assert report.to_metadata()["n_token_drift_turns"] == 1
    assert TracerTraceToTriplet(check_token_drift=False).adapt_with_report([agent, t1, t2, t3])[1].token_drift == []


def test_litellm_spans_with_tracer_adapter():
    f = SpanFactory()
    outer, raw = f.litellm_call([USER], "4", prompt_ids=[11, 12], response_ids=[13], response_id="chatcmpl-l")
    adapter = TracerTraceToTriplet()
    (triplet,) = adapter.adapt([outer, raw])
    assert triplet.prompt["token_ids"] == [11, 12]
    assert triplet.response["token_ids"] == [13]
    assert triplet.prompt["raw_content"] == [{"role": "user", "content": "What is 2+2?"}]
    assert triplet.metadata["span_name"] == "litellm_request"
    # The raw_gen_ai_request child is part of the call, not a second LLM span (nor a dropped one).
    assert triplet.metadata["merged_span_ids"] == [raw.span_id]
    report = adapter.last_report
    assert report is not None and report.n_llm_spans == 1 and report.dropped == []


def test_weave_style_operation_output_token_ids():
    f = SpanFactory()
    span = f.span(
        "openai.chat.completions.create",
        {
            "agentlightning.operation.input.messages.0.role": "user",
            "agentlightning.operation.input.messages.0.content": "hi",
            "agentlightning.operation.output.id": "chatcmpl-w",
            "agentlightning.operation.output.prompt_token_ids": [1, 2],
            "agentlightning.operation.output.choices.0.message.content": "yo",
            "agentlightning.operation.output.choices.0.token_ids.0": 3,
            "agentlightning.operation.output.choices.0.token_ids.1": 4,
        },
    )
    (triplet,) = TracerTraceToTriplet().adapt([span])
    assert triplet.prompt["token_ids"] == [1, 2]
    assert triplet.response["token_ids"] == [3, 4]
    assert triplet.metadata["response_id"] == "chatcmpl-w"
    assert triplet.prompt["raw_content"] == [{"role": "user", "content": "hi"}]


def test_image_urls_are_extracted_from_prompt():
    f = SpanFactory()
    content = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.test/cat.png"}},
    ]
    call = f.openai_call([{"role": "user", "content": content}], prompt_ids=[1], response_ids=[2])
    (triplet,) = TracerTraceToTriplet().adapt([call])
    assert triplet.prompt["image_urls"] == ["https://example.test/cat.png"]


def test_adapt_with_report_does_not_touch_last_report():
    adapter = TracerTraceToTriplet()
    triplets, report = adapter.adapt_with_report(two_turn_rollout(SpanFactory()))
    assert len(triplets) == 2 and report.n_triplets == 2
    assert adapter.last_report is None
