"""Meta-prompts (built-in and user-supplied), experiment transcripts, and the critique/edit calls."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI

from agentlightning.algorithm.apo.evaluation import RolloutResult
from agentlightning.algorithm.apo.gradient import (
    apply_edit,
    clean_edit_reply,
    experiments_from_results,
    placeholder_list,
    transcript,
    write_critique,
)
from agentlightning.algorithm.apo.llm import RetryPolicy
from agentlightning.algorithm.apo.prompts import (
    APPLY_EDIT_PROMPT_FILES,
    GRADIENT_PROMPT_FILES,
    builtin_prompt_path,
    load_meta_prompts,
)
from agentlightning.types import PromptTemplate
from tests.support.openai_server import OpenAITestServer, ReplyLike

CONVERSATION: Any = {
    "messages": [
        {"role": "system", "content": "Pick a room."},
        {"role": "user", "content": "4 people at 10:00"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "rooms", "arguments": '{"t": 10}'}}],
        },
        {"role": "tool", "content": '[{"id": "A"}]', "tool_call_id": "c1"},
        {"role": "assistant", "content": "Room A"},
    ],
    "tools": None,
}
PREFIX: Any = {"messages": CONVERSATION["messages"][:3], "tools": None}


def _results() -> list[RolloutResult]:
    return [
        RolloutResult("ro-1", {"people": 4}, "succeeded", 1.0, [PREFIX, CONVERSATION]),
        RolloutResult("ro-2", "plain text task", "failed", None, []),
    ]


def test_transcript_shows_each_call_once_with_tool_calls() -> None:
    text = transcript([PREFIX, CONVERSATION])
    assert text.count("[user] 4 people at 10:00") == 1
    assert '[assistant] (calls rooms({"t": 10}))' in text
    assert '[tool] [{"id": "A"}]' in text and text.endswith("[assistant] Room A")
    assert transcript([]) == "(no LLM messages were recorded for this run)"
    unrelated = {"messages": [{"role": "user", "content": "other call"}], "tools": None}
    assert "\n...\n" in transcript([unrelated, CONVERSATION])


def test_experiments_number_runs_and_describe_rewards() -> None:
    first, second = experiments_from_results(_results())
    assert (first.index, first.task, first.reward_text, first.status) == (1, '{"people": 4}', "1.000", "succeeded")
    assert (second.index, second.task, second.reward_text) == (2, "plain text task", "none (counted as 0)")
    assert len(first.messages) == 8 and second.transcript.startswith("(no LLM messages")


def test_long_contents_are_shortened() -> None:
    huge = {"messages": [{"role": "user", "content": "x" * 5000}], "tools": None}
    assert "[3000 more characters]" in transcript([huge])


@pytest.mark.parametrize("name", GRADIENT_PROMPT_FILES)
def test_builtin_gradient_prompts_render(name: str) -> None:
    (prompt,) = load_meta_prompts(None, [builtin_prompt_path(name).read_text()], defaults=(), kind="gradient")
    text = prompt.render(
        prompt_template="Answer {question}",
        placeholders=["{question}"],
        engine="f-string",
        experiments=experiments_from_results(_results()),
    )
    assert "Answer {question}" in text
    assert "4 people at 10:00" in text and "1.000" in text and "none (counted as 0)" in text
    assert "{{" not in text and "{%" not in text


@pytest.mark.parametrize("name", APPLY_EDIT_PROMPT_FILES)
def test_builtin_edit_prompts_render(name: str) -> None:
    (prompt,) = load_meta_prompts(None, [builtin_prompt_path(name).read_text()], defaults=(), kind="edit")
    text = prompt.render(
        prompt_template="Answer {question}", placeholders=["{question}"], engine="f-string", critique="- be brief"
    )
    assert "<prompt_template>\nAnswer {question}\n</prompt_template>" in text
    assert "<critique>\n- be brief\n</critique>" in text
    assert "({question})" in text and "doubled ({{ or }})" in text
    jinja_text = prompt.render(prompt_template="Hi {{ x }}", placeholders=["{{ x }}"], engine="jinja", critique="c")
    assert "doubled" not in jinja_text


def test_defaults_files_and_strings(tmp_path: Path) -> None:
    assert [p.name for p in load_meta_prompts(None, None, defaults=GRADIENT_PROMPT_FILES, kind="g")] == list(
        GRADIENT_PROMPT_FILES
    )
    file = tmp_path / "mine.md"
    file.write_text("critique {{ prompt_template }}")
    prompts = load_meta_prompts([file], ["second {{ prompt_template }}"], defaults=GRADIENT_PROMPT_FILES, kind="g")
    assert [p.name for p in prompts] == ["mine.md", "g-string-0"]
    assert prompts[0].render(prompt_template="T") == "critique T"


def test_bad_meta_prompts_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="gradient prompt file '.*missing.md' does not exist"):
        load_meta_prompts([tmp_path / "missing.md"], None, defaults=(), kind="gradient")
    with pytest.raises(ValueError, match="gradient prompt string #0 is empty"):
        load_meta_prompts(None, ["  "], defaults=(), kind="gradient")
    (prompt,) = load_meta_prompts(None, ["{{ nothing_like_this }}"], defaults=(), kind="gradient")
    with pytest.raises(ValueError, match="uses an unknown variable .*available: prompt_template"):
        prompt.render(prompt_template="x")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("  New prompt {q}\n", "New prompt {q}"),
        ("```\nNew prompt {q}\n```", "New prompt {q}"),
        ("```text\nLine 1\nLine 2\n```", "Line 1\nLine 2"),
        ("<prompt_template>\nNew {q}\n</prompt_template>", "New {q}"),
        ("Use ``` fences inside", "Use ``` fences inside"),
        ("<think>\nThe user wants {q} kept.\n</think>\n\nNew {q}", "New {q}"),
        ("<think>plan</think>```\nNew {q}\n```", "New {q}"),
    ],
)
def test_clean_edit_reply(reply: str, expected: str) -> None:
    assert clean_edit_reply(reply) == expected


def test_placeholder_list_per_engine() -> None:
    assert placeholder_list(PromptTemplate(template="{b} and {a}", engine="f-string")) == ["{a}", "{b}"]
    assert placeholder_list(PromptTemplate(template="{{ who }}", engine="jinja")) == ["{{ who }}"]
    assert placeholder_list(PromptTemplate(template="broken {", engine="f-string")) == []


async def test_critique_and_edit_calls() -> None:
    requests: list[dict[str, Any]] = []

    def respond(request: dict[str, Any]) -> ReplyLike:
        requests.append(request)
        return "- say hello" if request["model"] == "critic" else "```\nHello! Answer {question}\n```"

    gradient_prompts = load_meta_prompts(None, None, defaults=GRADIENT_PROMPT_FILES, kind="gradient")
    edit_prompts = load_meta_prompts(None, None, defaults=APPLY_EDIT_PROMPT_FILES, kind="edit")
    prompt = PromptTemplate(template="Answer {question}", engine="f-string")
    with OpenAITestServer(respond) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        results = [RolloutResult(f"ro-{i}", {"i": i}, "succeeded", 0.5, []) for i in range(5)]
        critique = await write_critique(
            client,
            model="critic",
            temperature=1.3,
            prompt=prompt,
            results=results,
            sample_size=3,
            meta_prompts=gradient_prompts,
            rng=random.Random(0),
            retry=RetryPolicy(),
        )
        edited, edit_name = await apply_edit(
            client,
            model="editor",
            prompt=prompt,
            critique=critique.text,
            meta_prompts=edit_prompts,
            rng=random.Random(0),
            retry=RetryPolicy(),
        )
    assert critique.text == "- say hello" and critique.meta_prompt in GRADIENT_PROMPT_FILES
    assert len(critique.rollout_ids) == 3 and set(critique.rollout_ids) <= {r.rollout_id for r in results}
    assert edited == "Hello! Answer {question}" and edit_name in APPLY_EDIT_PROMPT_FILES
    assert requests[0]["temperature"] == 1.3 and "temperature" not in requests[1]
    assert "- say hello" in requests[1]["messages"][0]["content"]
