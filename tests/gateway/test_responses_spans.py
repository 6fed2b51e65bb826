"""A Responses answer as the chat-shaped span the gateway records: its token ids, wherever the backend puts them."""

from __future__ import annotations

from agentlightning.gateway.responses import responses_response_as_chat

OUTPUT = [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}]


def test_token_ids_on_the_response_are_the_reply_ids() -> None:
    """The policy server (and `formats.responses`) put the sampled ids in the Response's `token_ids`."""
    chat = responses_response_as_chat(
        {"id": "r", "status": "completed", "output": OUTPUT, "prompt_token_ids": [1, 2], "token_ids": [7, 8, 2]}
    )
    assert chat["prompt_token_ids"] == [1, 2]
    assert chat["choices"][0]["token_ids"] == [7, 8, 2]


def test_output_token_ids_and_item_token_ids_still_count() -> None:
    assert responses_response_as_chat({"output": OUTPUT, "output_token_ids": [5]})["choices"][0]["token_ids"] == [5]
    item = {**OUTPUT[0], "token_ids": [6, 2]}
    assert responses_response_as_chat({"output": [item]})["choices"][0]["token_ids"] == [6, 2]
