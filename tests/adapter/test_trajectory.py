"""Trajectory aggregation on hand-built token sequences: merges, loss masks, and every continuity break cause."""

from __future__ import annotations

from agentlightning.adapter import AdaptationReport
from agentlightning.adapter.report import check_token_drift
from agentlightning.adapter.trajectory import TurnTokens, break_counts, classify_break, merge_turns, triplet_tokens
from agentlightning.types import Triplet

# A toy vocabulary for the decode-aware cases: ids 60 and 61 spell "ab" one letter at a time, 62 spells it at once.
_VOCAB = {1: "<s>", 2: "sys", 3: "Q", 60: "a", 61: "b", 62: "ab", 7: "[tool=5]", 8: "[tool 5]", 9: "!", 90: "X"}


def decode(ids: list[int]) -> str:
    return "".join(_VOCAB.get(i, f"<{i}>") for i in ids)


def test_continuous_calls_merge_into_one_row_with_context_masked_out() -> None:
    turns = [
        TurnTokens([1, 2, 3], [60, 61], [-0.1, -0.2], index=0),
        # prompt = previous prompt + previous response + a tool result (7) + generation header (3)
        TurnTokens([1, 2, 3, 60, 61, 7, 3], [9], [-0.3], index=1),
        TurnTokens([1, 2, 3, 60, 61, 7, 3, 9, 8], [62, 9], [-0.4, -0.5], index=2),
    ]
    rows, breaks = merge_turns(turns)
    assert breaks == []
    (row,) = rows
    assert row.prompt_ids == [1, 2, 3]
    assert row.response_ids == [60, 61, 7, 3, 9, 8, 62, 9]
    assert row.loss_mask == [1, 1, 0, 0, 1, 0, 1, 1]
    assert row.logprobs == [-0.1, -0.2, 0.0, 0.0, -0.3, 0.0, -0.4, -0.5]
    assert row.turns == [0, 1, 2] and row.trained_tokens == 5
    # The row holds every token of the last call: its prompt + response.
    assert row.prompt_ids + row.response_ids == turns[-1].prompt_ids + turns[-1].response_ids


def test_a_call_without_logprobs_makes_the_row_recompute_them() -> None:
    rows, _ = merge_turns([TurnTokens([1, 2], [60], [-0.1], 0), TurnTokens([1, 2, 60, 7], [9], None, 1)])
    assert rows[0].logprobs is None and rows[0].loss_mask == [1, 0, 1]


def test_chat_template_re_rendering_of_earlier_turns_starts_a_new_row() -> None:
    # The second prompt rewrites the question (3 -> 90) the first prompt had: the history text changed.
    turns = [TurnTokens([1, 2, 2, 3], [60], None, 0), TurnTokens([1, 2, 2, 90, 60, 7], [9], None, 1)]
    rows, (brk,) = merge_turns(turns)
    assert [r.turns for r in rows] == [[0], [1]]
    assert (brk.turn, brk.previous_turn, brk.mismatch_index, brk.cause) == (1, 0, 3, "chat_template")
    assert (brk.expected_prefix_length, brk.prompt_length) == (5, 6)
    _, (with_decode,) = merge_turns(turns, decode=decode)
    assert with_decode.cause == "chat_template"


def test_retokenized_response_is_told_apart_by_text_when_decode_is_given() -> None:
    # The model generated "a","b" (60, 61); the next prompt carries the same text as one token (62).
    turns = [TurnTokens([1, 2, 3], [60, 61], None, 0), TurnTokens([1, 2, 3, 62, 7], [9], None, 1)]
    _, (guess,) = merge_turns(turns)
    assert guess.cause == "retokenization" and guess.mismatch_index == 3
    _, (exact,) = merge_turns(turns, decode=decode)
    assert exact.cause == "retokenization"
    # The response re-rendered as other text (a tool call rewritten by the template) is not retokenization.
    rewritten = [TurnTokens([1, 2, 3], [7], None, 0), TurnTokens([1, 2, 3, 8, 9], [60], None, 1)]
    _, (template,) = merge_turns(rewritten, decode=decode)
    assert template.cause == "chat_template"


def test_an_unrelated_prompt_is_another_cause_and_rows_resume_merging_after_a_break() -> None:
    turns = [
        TurnTokens([1, 2, 3, 3], [60], None, 0),
        TurnTokens([1, 90, 90, 90], [61], None, 1),  # another conversation (e.g. a judge)
        TurnTokens([1, 90, 90, 90, 61, 7], [9], None, 2),  # continues the second one
    ]
    rows, breaks = merge_turns(turns, decode=decode)
    assert [r.turns for r in rows] == [[0], [1, 2]]
    assert [b.cause for b in breaks] == ["other"]
    assert break_counts(breaks) == {"chat_template": 0, "retokenization": 0, "other": 1}
    assert classify_break([1, 2, 3, 4], [5], [1, 2, 3, 4, 6], 4) == "retokenization"
    assert classify_break([1, 2, 3, 4], [5], [1, 2, 3, 9], 3) == "chat_template"


def _triplet(prompt: list[int], response: list[int]) -> Triplet:
    return Triplet(prompt={"token_ids": prompt}, response={"token_ids": response, "logprobs": [-1.0] * len(response)})


def test_the_adaptation_report_counts_breaks_by_cause() -> None:
    triplets = [_triplet([1, 2, 3, 3], [60, 61]), _triplet([1, 2, 3, 3, 62], [9]), _triplet([90], [9])]
    drifts = check_token_drift(triplets, decode=decode)
    assert [(d.turn, d.cause) for d in drifts] == [(1, "retokenization"), (2, "other")]
    report = AdaptationReport(adapter="X", n_triplets=3, token_drift=drifts)
    assert report.to_metadata()["break_counts"] == {"chat_template": 0, "retokenization": 1, "other": 1}
    assert "retokenization=1" in report.summary() and "other=1" in report.summary()
    assert AdaptationReport.model_validate_json(report.model_dump_json()) == report
    assert triplet_tokens(triplets[0]) == ([1, 2, 3, 3], [60, 61], [-1.0, -1.0])
