"""A conversation that comes back longer keeps the ids the model sampled for its earlier turns."""

from __future__ import annotations

from typing import Any, List

import openai
import pytest

from agentlightning.serving.chat import render_chat_text
from agentlightning.serving.sampled_turns import SampledTurns
from agentlightning.serving.server import PolicyServer
from tests.support.policy_capture import PromptScriptedLM
from tests.support.tiny_model import tiny_tokenizer

pytestmark = pytest.mark.train

QUESTION = [{"role": "user", "content": "hello world"}]


def spelled(tokenizer: Any, text: str) -> List[int]:
    """Not the canonical tokenization: one id per character."""
    return [i for ch in text for i in tokenizer.encode(ch, add_special_tokens=False)]


def test_a_remembered_turn_keeps_its_ids_and_the_rest_is_tokenized() -> None:
    tokenizer = tiny_tokenizer()
    turns = SampledTurns(tokenizer)
    prompt_text = render_chat_text(tokenizer, QUESTION)
    prompt_ids = tokenizer.encode(prompt_text, add_special_tokens=False)
    reply = spelled(tokenizer, "the quick fox") + [tokenizer.eos_token_id]
    assert reply[:-1] != tokenizer.encode("the quick fox", add_special_tokens=False)
    turns.remember(prompt_text, prompt_ids, reply)

    longer = [*QUESTION, {"role": "assistant", "content": "the quick fox"}, {"role": "user", "content": "yes"}]
    text = render_chat_text(tokenizer, longer)
    ids = turns.encode(text)
    assert ids[: len(prompt_ids) + len(reply)] == prompt_ids + reply
    assert tokenizer.decode(ids) == text and turns.reused_prompts == 1
    assert turns.encode("something else") == tokenizer.encode("something else", add_special_tokens=False)


def test_ids_that_do_not_decode_to_their_text_are_not_remembered() -> None:
    tokenizer = tiny_tokenizer()
    turns = SampledTurns(tokenizer, max_entries=2)
    prompt_ids = tokenizer.encode("hello", add_special_tokens=False)
    turns.remember("hello there", prompt_ids, [5])  # the ids spell "hello", not the text they claim
    assert len(turns) == 0
    for word in ("the", "quick", "brown"):  # the least recently used entry goes first
        turns.remember(word, tokenizer.encode(word, add_special_tokens=False), [7])
    assert len(turns) == 2
    with pytest.raises(ValueError, match="max_entries"):
        SampledTurns(tokenizer, max_entries=0)


@pytest.mark.parametrize("keep", [True, False])
def test_the_policy_server_prompts_the_next_turn_with_the_sampled_ids(keep: bool) -> None:
    tokenizer = tiny_tokenizer()
    model = PromptScriptedLM(tokenizer, lambda prompt: "the quick fox", lambda text: spelled(tokenizer, text))
    with PolicyServer(model, tokenizer, deterministic=True, default_max_tokens=32, keep_sampled_turns=keep) as server:
        client = openai.OpenAI(base_url=server.endpoint, api_key="k", max_retries=0)
        first = client.chat.completions.create(model="policy", messages=QUESTION)  # type: ignore[arg-type]
        reply = first.choices[0].message.content
        assert reply == "the quick fox"
        messages = [*QUESTION, {"role": "assistant", "content": reply}, {"role": "user", "content": "yes"}]
        client.chat.completions.create(model="policy", messages=messages)  # type: ignore[arg-type]
        client.close()
    (prompt1, reply1), (prompt2, _) = model.calls
    sampled = prompt1 + reply1 + [tokenizer.eos_token_id]
    assert (prompt2[: len(sampled)] == sampled) is keep
    assert tokenizer.decode(prompt2) == render_chat_text(tokenizer, messages)


def test_short_and_long_remembered_texts_are_found_by_their_prefix() -> None:
    tokenizer = tiny_tokenizer()
    turns = SampledTurns(tokenizer)
    short = spelled(tokenizer, "yes")  # shorter than the tail compared first
    turns.remember("", [], short)
    assert turns.encode("yes no")[: len(short)] == short
    long_ids = spelled(tokenizer, "the quick brown fox jumps over the lazy dog")
    turns.remember("", [], long_ids)
    assert turns.encode("the quick brown fox jumps over the lazy dog!")[: len(long_ids)] == long_ids
    assert turns.encode("the quick brown fox jumps over the lazy cat") == tokenizer.encode(
        "the quick brown fox jumps over the lazy cat", add_special_tokens=False
    )
