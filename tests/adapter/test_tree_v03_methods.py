"""TraceTree's public v0.3 methods: find_id, to_json, agent_name, reward readers, match_rewards, image URLs,
span_to_triplet, and traverse returning a list."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentlightning.adapter.triplet import RewardMatchPolicy, TraceTree
from agentlightning.semconv import AGL_OPERATION, AGL_REWARD, LightningSpanAttributes

from .span_factory import SpanFactory

USER = {"role": "user", "content": "hi"}


def _tree() -> tuple[TraceTree, dict[str, Any]]:
    f = SpanFactory()
    root = f.span("root", start=0, end=100)
    agent = f.agent("planner", parent=root, start=1, end=50)
    call_1 = f.openai_call([USER], response_id="r1", prompt_ids=[1], response_ids=[2], parent=agent, start=2, end=3)
    reward_1 = f.reward(0.5, parent=agent, start=4, end=4)
    call_2 = f.openai_call([USER], response_id="r2", prompt_ids=[3], response_ids=[4], parent=root, start=60, end=61)
    reward_2 = f.reward(1.0, parent=root, start=62, end=62)
    spans = {"root": root, "agent": agent, "call_1": call_1, "reward_1": reward_1, "call_2": call_2}
    spans["reward_2"] = reward_2
    return TraceTree.from_spans(list(spans.values())), spans


def test_traverse_is_a_preorder_list_and_find_id_finds_any_node() -> None:
    tree, spans = _tree()
    nodes = tree.traverse()
    assert isinstance(nodes, list)
    assert [n.span.name for n in nodes][:3] == ["root", "agent.planner", "openai.chat.completion"]
    assert [n.id for n in nodes] == [
        spans[k].span_id for k in ("root", "agent", "call_1", "reward_1", "call_2", "reward_2")
    ]
    found = tree.find_id(spans["reward_1"].span_id)
    assert found is not None and found.span is spans["reward_1"]
    assert tree.find_id("no-such-span") is None


def test_to_json_nests_ids_spans_and_children_and_is_json_serialisable() -> None:
    tree, spans = _tree()
    data = tree.to_json()
    assert data["id"] == spans["root"].span_id and data["span"] == spans["root"].model_dump()
    agent = data["children"][0]
    assert agent["span"]["name"] == "agent.planner"
    assert [c["id"] for c in agent["children"]] == [spans["call_1"].span_id, spans["reward_1"].span_id]
    assert json.loads(json.dumps(data)) == data


def test_agent_name_and_names_tuple_follow_v03() -> None:
    tree, spans = _tree()
    agent = tree.find_id(spans["agent"].span_id)
    assert agent is not None and agent.agent_name() == "planner"
    assert tree.agent_name() is None
    assert tree.names_tuple()[1][0][0] == "agent.planner [planner]"
    f = SpanFactory()
    weave_chain = f.span("langchain.Chain.RunnableSequence", {"lc_name": "sql_agent"})
    assert TraceTree.from_spans([weave_chain]).agent_name() == "sql_agent"


def test_reward_readers() -> None:
    tree, spans = _tree()
    reward = tree.find_id(spans["reward_1"].span_id)
    assert reward is not None
    assert reward.maybe_reward_dict() == {"type": "reward", "value": 0.5}
    assert reward.is_reward_span()
    assert tree.maybe_reward_dict() == {} and not tree.is_reward_span()
    f = SpanFactory()
    pending = f.span(AGL_OPERATION, {LightningSpanAttributes.OPERATION_NAME.value: AGL_REWARD})
    node = TraceTree.from_spans([pending])
    assert node.maybe_reward_dict() == {} and node.is_reward_span()  # a @reward operation, value not yet set


def test_match_rewards_returns_the_reward_of_each_call_node_per_policy() -> None:
    tree, spans = _tree()
    calls = [n for n in tree.traverse() if n.span.name == "openai.chat.completion"]
    call_1, call_2 = (spans["call_1"].span_id, spans["call_2"].span_id)
    assert tree.match_rewards(RewardMatchPolicy.FIRST_OCCURRENCE, calls) == {call_1: 0.5, call_2: 1.0}
    assert tree.match_rewards("first_sibling", calls) == {call_1: 0.5, call_2: 1.0}
    # A reward goes to a call that ended before it: reward_1 (t=4) precedes call_2 (t=60) and is left over.
    assert tree.match_rewards("first_occurrence", calls[1:]) == {call_2: 1.0}
    assert tree.match_rewards("first_occurrence", []) == {}


def test_extract_prompt_image_urls_reads_v03_prompt_shapes() -> None:
    tree, _ = _tree()
    parts = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "https://x/1.png"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
    ]
    assert tree.extract_prompt_image_urls([{"role": "user", "content": parts}]) == [
        "https://x/1.png",
        "data:image/png;base64,AAA",
    ]
    flattened = {"0": {"role": "system", "content": "terse"}, "1": {"role": "user", "content": json.dumps(parts[:2])}}
    assert tree.extract_prompt_image_urls(flattened) == ["https://x/1.png"]
    assert tree.extract_prompt_image_urls("plain text") == []
    assert tree.extract_prompt_image_urls(None) == []


def test_span_to_triplet_reads_one_call_span() -> None:
    tree, spans = _tree()
    triplet = tree.span_to_triplet(spans["call_1"], "planner")
    assert triplet.prompt["token_ids"] == [1] and triplet.response["token_ids"] == [2]
    assert triplet.prompt["raw_content"] == [USER] and triplet.prompt["image_urls"] == []
    assert triplet.response["raw_content"][0]["content"] == "ok"
    assert triplet.reward is None
    assert triplet.metadata["response_id"] == "r1" and triplet.metadata["agent_name"] == "planner"
    assert triplet.metadata["request"]["model"] == "test-model"


def test_to_trajectory_takes_v03_positional_arguments() -> None:
    tree, _ = _tree()
    # v0.3's order: llm_call_match, agent_match, exclude_llm_call_in_reward, dedup_llm_call, reward_match, final_reward
    triplets = tree.to_trajectory(r"openai\.chat\.completion", None, True, True, "first_occurrence", 2.0)
    assert [t.metadata["response_id"] for t in triplets] == ["r1", "r2"]
    assert [t.reward for t in triplets] == [0.5, 2.0]
    with pytest.raises(ValueError, match="dedup_llm_call=False"):
        tree.to_trajectory(dedup_llm_call=False)


def test_find_llm_calls_in_v03_keyword_form_returns_node_and_agent_pairs() -> None:
    tree, spans = _tree()
    calls = tree.find_llm_calls(llm_call_match=r"openai\.chat", agent_match=None)
    # only the call under an agent span counts: the second call sits directly under the root
    assert [(node.span.span_id, agent) for node, agent in calls] == [(spans["call_1"].span_id, "planner")]
    assert tree.find_llm_calls(llm_call_match=r"openai\.chat", agent_match="^other$") == []


def test_find_llm_calls_in_v03_form_skips_repeated_response_ids_and_calls_under_rewards() -> None:
    f = SpanFactory()
    root = f.span("root", start=0, end=100)
    agent = f.agent("planner", parent=root, start=1, end=50)
    first = f.openai_call([USER], response_id="r1", prompt_ids=[1], response_ids=[2], parent=agent, start=2, end=3)
    again = f.openai_call([USER], response_id="r1", prompt_ids=[1], response_ids=[2], parent=agent, start=4, end=5)
    reward = f.reward(1.0, parent=agent, start=6, end=9)
    judged = f.openai_call([USER], response_id="r9", prompt_ids=[5], response_ids=[6], parent=reward, start=7, end=8)
    tree = TraceTree.from_spans([root, agent, first, again, reward, judged])
    seen: set[str] = set()  # as in v0.3, repeats are recognised across siblings through the caller's set
    calls = tree.find_llm_calls(
        llm_call_match=r"openai\.chat", agent_match="planner", within_reward=False, existing_llm_call_response_ids=seen
    )
    assert [node.span.span_id for node, _ in calls] == [first.span_id]
    assert seen == {"r1"}
    every = tree.find_llm_calls(llm_call_match=r"openai\.chat", agent_match="planner")
    assert [node.span.span_id for node, _ in every] == [first.span_id, again.span_id, judged.span_id]


def test_find_llm_calls_needs_a_matcher_or_the_v03_form() -> None:
    tree, _ = _tree()
    with pytest.raises(TypeError, match="matcher"):
        tree.find_llm_calls()
