"""LlmProxyTraceToTriplet: proxy spans ordered by sequence id, never by clock."""

from __future__ import annotations

import random

from agentlightning.adapter import LlmProxyTraceToTriplet

from .span_factory import SpanFactory, assert_accounted

USER = {"role": "user", "content": "hi"}


def test_litellm_calls_ordered_by_sequence_id_even_with_shuffled_clocks():
    f = SpanFactory()
    # Sequence ids come from the store; clocks come from different machines and disagree.
    c1 = f.litellm_call([USER], "a", prompt_ids=[1], response_ids=[2], response_id="r1", sequence_id=1, start=500.0)
    c2 = f.litellm_call(
        [USER], "b", prompt_ids=[1, 2, 3], response_ids=[4], response_id="r2", sequence_id=2, start=10.0
    )
    reward = f.reward(0.75, sequence_id=3, start=1.0, end=1.0)
    c3 = f.litellm_call(
        [USER], "c", prompt_ids=[5], response_ids=[6], response_id="r3", sequence_id=4, start=0.0, literal_choices=False
    )
    spans = [*c1, *c2, reward, *c3]
    random.Random(7).shuffle(spans)
    adapter = LlmProxyTraceToTriplet()
    triplets = adapter.adapt(spans)
    assert [t.metadata["response_id"] for t in triplets] == ["r1", "r2", "r3"]
    assert [t.prompt["token_ids"] for t in triplets] == [[1], [1, 2, 3], [5]]
    assert [t.response["token_ids"] for t in triplets] == [[2], [4], [6]]
    assert [t.reward for t in triplets] == [None, 0.75, None]
    assert all(t.metadata["span_name"] == "litellm_request" for t in triplets)
    report = adapter.last_report
    assert report is not None
    assert report.n_triplets == 3
    # Each raw_gen_ai_request child is part of its litellm_request call: one LLM span per call, nothing dropped.
    assert report.n_llm_spans == 3 and report.dropped == []
    assert [t.metadata["merged_span_ids"] for t in triplets] == [[c[1].span_id] for c in (c1, c2, c3)]
    assert_accounted(report)


def test_each_reward_goes_to_latest_unmatched_call_with_smaller_sequence_id():
    f = SpanFactory()
    c1 = f.openai_call([USER], response_id="r1", prompt_ids=[1], response_ids=[2], sequence_id=1, start=9)
    c2 = f.openai_call([USER], response_id="r2", prompt_ids=[3], response_ids=[4], sequence_id=2, start=8)
    rw1 = f.reward(0.1, sequence_id=3, start=7)
    rw2 = f.reward(0.2, sequence_id=4, start=6)
    rw3 = f.reward(0.3, sequence_id=5, start=5)
    early = f.reward(0.9, sequence_id=0, start=4)
    adapter = LlmProxyTraceToTriplet()
    triplets = adapter.adapt([rw3, c2, rw1, early, c1, rw2])
    assert [t.reward for t in triplets] == [0.2, 0.1]
    report = adapter.last_report
    assert report is not None
    assert sorted(u.value for u in report.unmatched_rewards) == [0.3, 0.9]
    assert report.n_reward_spans == 4


def test_our_proxy_spans_with_same_sequence_id_are_one_call():
    f = SpanFactory()
    # Our proxy records the request and the upstream call; both carry the request's sequence id.
    request_span = f.span("POST /v1/chat/completions", {"http.method": "POST"}, sequence_id=1)
    upstream = f.openai_call(
        [USER], response_id="chatcmpl-p", prompt_ids=[1, 2], response_ids=[3], parent=request_span, sequence_id=1
    )
    adapter = LlmProxyTraceToTriplet()
    (triplet,) = adapter.adapt([upstream, request_span])
    assert triplet.prompt["token_ids"] == [1, 2]
    assert triplet.metadata["span_name"] == "openai.chat.completion"
    assert adapter.last_report is not None and adapter.last_report.dropped == []


def test_token_id_variants_of_the_raw_provider_span():
    f = SpanFactory()
    nested_list = f.span(
        "raw_gen_ai_request",
        {"llm.hosted_vllm.prompt_token_ids": [1, 2], "llm.hosted_vllm.response_token_ids": "[[3, 4], [5]]"},
        sequence_id=1,
    )
    provider_fields = f.span(
        "raw_gen_ai_request",
        {
            "llm.hosted_vllm.prompt_token_ids": "[6]",
            "llm.hosted_vllm.choices": str([{"index": 0, "provider_specific_fields": {"token_ids": [7, 8]}}]),
        },
        sequence_id=2,
    )
    pydantic_repr = f.span(
        "raw_gen_ai_request",
        {
            "llm.openai.prompt_token_ids": "[9, 10]",
            "llm.openai.choices": "[Choices(finish_reason='stop', index=0, token_ids=[11, 12], message=Message(content='x'))]",
        },
        sequence_id=3,
    )
    triplets = LlmProxyTraceToTriplet().adapt([nested_list, provider_fields, pydantic_repr])
    assert [t.prompt["token_ids"] for t in triplets] == [[1, 2], [6], [9, 10]]
    assert [t.response["token_ids"] for t in triplets] == [[3, 4], [7, 8], [11, 12]]


def test_skip_empty_token_spans_in_proxy_adapter():
    f = SpanFactory()
    empty = f.openai_call([USER], response_id="e", sequence_id=1)
    full = f.openai_call([USER], response_id="f", prompt_ids=[1], response_ids=[2], sequence_id=2)
    adapter = LlmProxyTraceToTriplet(_skip_empty_token_spans=True)
    (triplet,) = adapter.adapt([empty, full])
    assert triplet.metadata["response_id"] == "f"
    assert adapter.last_report is not None
    assert [d.reason for d in adapter.last_report.dropped] == ["no_token_ids"]
    assert_accounted(adapter.last_report)


def test_response_id_is_read_from_litellm_provider_attributes():
    from agentlightning.adapter.llm_call import response_id_of

    f = SpanFactory()
    vllm = f.span("raw_gen_ai_request", {"llm.hosted_vllm.id": "chatcmpl-v", "llm.hosted_vllm.prompt_token_ids": "[1]"})
    openai = f.span("raw_gen_ai_request", {"llm.openai.id": "chatcmpl-o"})
    assert response_id_of(vllm) == "chatcmpl-v"
    assert response_id_of(openai) == "chatcmpl-o"
    assert response_id_of(f.span("raw_gen_ai_request", {"llm.hosted_vllm.model": "m"})) is None


def test_spans_of_one_call_with_different_sequence_ids_are_deduplicated_by_response_id():
    f = SpanFactory()
    # The summary span and the raw provider span reached the store separately (different sequence ids);
    # the raw span names the response only through `llm.hosted_vllm.id`.
    summary = f.span(
        "litellm_request",
        {"gen_ai.response.id": "chatcmpl-1", "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "hi"},
        sequence_id=1,
    )
    raw = f.span(
        "raw_gen_ai_request",
        {
            "llm.hosted_vllm.id": "chatcmpl-1",
            "llm.hosted_vllm.prompt_token_ids": "[1, 2]",
            "llm.hosted_vllm.response_token_ids": "[[3]]",
        },
        sequence_id=2,
    )
    adapter = LlmProxyTraceToTriplet()
    (triplet,) = adapter.adapt([summary, raw])
    assert triplet.metadata["response_id"] == "chatcmpl-1"
    assert triplet.prompt["token_ids"] == [1, 2] and triplet.response["token_ids"] == [3]
    assert adapter.last_report is not None
    assert_accounted(adapter.last_report)


def test_litellm_request_without_token_ids_is_dropped_and_reported_not_emitted_empty():
    f = SpanFactory()
    bare = f.span(
        "litellm_request",
        {"gen_ai.response.id": "chatcmpl-2", "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "hi"},
        sequence_id=1,
    )
    full = f.litellm_call([USER], "ok", prompt_ids=[5], response_ids=[6], response_id="chatcmpl-3", sequence_id=2)
    adapter = LlmProxyTraceToTriplet()
    triplets = adapter.adapt([bare, *full])
    assert [t.metadata["response_id"] for t in triplets] == ["chatcmpl-3"]
    assert all(t.prompt["token_ids"] and t.response["token_ids"] for t in triplets)
    report = adapter.last_report
    assert report is not None
    (dropped,) = [d for d in report.dropped if d.span_id == bare.span_id]
    assert dropped.reason == "no_token_ids" and "litellm_request" in dropped.detail
    assert_accounted(report)
