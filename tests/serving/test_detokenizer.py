"""Incremental detokenization: deltas add up to the text, stop strings cut it, partial matches wait."""

from __future__ import annotations

import pytest

from agentlightning.serving._detokenizer import IncrementalDetokenizer
from tests.support.tiny_model import tiny_tokenizer

pytestmark = pytest.mark.train


def _feed(text: str, stop: tuple[str, ...] = ()) -> tuple[list[str], IncrementalDetokenizer, bool]:
    tokenizer = tiny_tokenizer()
    detokenizer = IncrementalDetokenizer(tokenizer, stop)
    deltas, stopped = [], False
    for token_id in tokenizer.encode(text, add_special_tokens=False):
        delta, stopped = detokenizer.push(token_id)
        deltas.append(delta)
        if stopped:
            break
    return deltas, detokenizer, stopped


def test_deltas_concatenate_to_the_decoded_text_including_multibyte_characters() -> None:
    text = "hello wörld 你好 the fox"
    deltas, detokenizer, stopped = _feed(text)
    assert not stopped
    assert "".join(deltas) + detokenizer.flush() == text == detokenizer.text
    # Incomplete UTF-8 is never emitted: no replacement characters in any delta.
    assert all("\ufffd" not in d for d in deltas)


def test_stop_string_ends_the_text_right_before_it() -> None:
    deltas, detokenizer, stopped = _feed("the quick brown fox jumps", stop=("brown",))
    assert stopped
    assert detokenizer.text == "the quick "
    assert "".join(deltas) + detokenizer.flush() == "the quick "


def test_text_that_may_start_a_stop_string_is_held_back_until_it_cannot() -> None:
    tokenizer = tiny_tokenizer()
    detokenizer = IncrementalDetokenizer(tokenizer, ("END",))
    emitted = ""
    for token_id in tokenizer.encode("abc EN", add_special_tokens=False):
        emitted += detokenizer.push(token_id)[0]
    assert not emitted.endswith("EN")
    assert emitted + detokenizer.flush() == "abc EN"
