"""The stand-in tokenizer fixtures are what `build.py` makes, with each family's special tokens and markers."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("tokenizers")

from tests.fixtures.tokenizers.build import FAMILIES, HERE, build  # noqa: E402
from tests.support.chat_templates import family_tokenizer  # noqa: E402

MESSAGES = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
    },
    {"role": "tool", "content": "sunny"},
]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
MARKERS = {
    "qwen2_5": [
        "<|im_start|>system\n",
        "<tools>",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>',
        "<tool_response>\nsunny\n</tool_response>",
    ],
    "qwen3_thinking": [
        "<tools>",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        "<tool_response>",
    ],
    "llama3": [
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n",
        '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>',
        "<|start_header_id|>ipython<|end_header_id|>\n\nsunny<|eot_id|>",
    ],
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_fixture_is_what_build_writes(family: str, tmp_path: Path) -> None:
    built = build(family, tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (built / name).read_text() == (HERE / family / name).read_text(), (
            f"rebuild {family}: python -m tests.fixtures.tokenizers.build"
        )
    assert sum(p.stat().st_size for p in (HERE / family).iterdir()) < 100_000


@pytest.mark.parametrize("family", list(FAMILIES))
def test_special_tokens_are_single_ids_and_the_template_has_the_family_structure(family: str) -> None:
    tokenizer = family_tokenizer(family)
    for token in FAMILIES[family]["special"] + FAMILIES[family]["added"]:
        assert tokenizer.convert_ids_to_tokens(tokenizer.encode(token, add_special_tokens=False)) == [token]
    text = tokenizer.apply_chat_template(MESSAGES, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    for marker in MARKERS[family]:
        assert marker in text
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text
