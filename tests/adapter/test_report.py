"""AdaptationReport counters and the token drift check."""

from __future__ import annotations

import logging

import pytest

from agentlightning.adapter.report import AdaptationReport, DroppedLlmCall, check_token_drift
from agentlightning.types import Triplet


def turn(prompt: list[int], response: list[int], span_id: str = "s") -> Triplet:
    return Triplet(prompt={"token_ids": prompt}, response={"token_ids": response}, metadata={"span_id": span_id})


def test_token_drift_none_when_each_prompt_extends_history():
    turns = [turn([1, 2], [3]), turn([1, 2, 3, 4], [5, 6]), turn([1, 2, 3, 4, 5, 6, 7], [8])]
    assert check_token_drift(turns) == []


def test_token_drift_reports_mismatch_position_and_lengths():
    turns = [turn([1, 2], [3]), turn([1, 2], [9], span_id="short"), turn([1, 2, 9, 4], [5], span_id="ok")]
    (drift,) = check_token_drift(turns)
    assert drift.turn == 1 and drift.previous_turn == 0
    assert drift.mismatch_index == 2  # the previous response (3) is missing from the prompt
    assert drift.expected_prefix_length == 3 and drift.prompt_length == 2
    assert drift.span_id == "short"


def test_token_drift_skips_turns_without_token_ids():
    turns = [turn([1], [2]), Triplet(prompt={"token_ids": []}, response={"token_ids": []}), turn([1, 2, 3], [4])]
    assert check_token_drift(turns) == []


def test_counts_metadata_and_summary():
    report = AdaptationReport(adapter="X", n_spans=5, n_llm_spans=3, n_triplets=1)
    report.dropped = [
        DroppedLlmCall(span_id="a", name="n", sequence_id=1, reason="duplicate", merged_into="z"),
        DroppedLlmCall(span_id="b", name="n", sequence_id=2, reason="agent_filtered"),
    ]
    assert report.drop_counts == {"duplicate": 1, "agent_filtered": 1}
    assert [d.span_id for d in report.lost_llm_calls] == ["b"]
    metadata = report.to_metadata()
    assert metadata["drop_counts"] == {"duplicate": 1, "agent_filtered": 1}
    assert metadata["n_triplets"] == 1 and metadata["n_unmatched_rewards"] == 0
    assert "agent_filtered=1" in report.summary() and "duplicate=1" in report.summary()
    assert AdaptationReport.model_validate_json(report.model_dump_json()) == report


def test_log_levels(caplog: pytest.LogCaptureFixture):
    logger = logging.getLogger("test.report")
    clean = AdaptationReport(adapter="X", n_spans=2, n_llm_spans=1, n_triplets=1)
    with caplog.at_level(logging.INFO, logger="test.report"):
        clean.log(logger)
    assert caplog.records == []
    lossy = AdaptationReport(adapter="X", n_spans=2, n_llm_spans=2, n_triplets=1)
    lossy.dropped = [DroppedLlmCall(span_id="b", name="n", sequence_id=2, reason="inside_reward_span")]
    with caplog.at_level(logging.INFO, logger="test.report"):
        lossy.log(logger, context="ro-9")
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    assert "[ro-9]" in caplog.text and "inside_reward_span=1" in caplog.text
