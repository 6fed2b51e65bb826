"""Earlier turns keep the token ids the model sampled when a conversation comes back longer.

A chat client sends the model's reply back as text; the chat template renders it again, and tokenizing that
text gives the canonical tokenization, which need not be the one the model sampled ("Par" + "is" for
"Paris", or `<`, `tool`, `_call`, `>` for the `<tool_call>` token). The next prompt would then not extend
the previous prompt + reply: the earlier turn was re-tokenized, and the trajectory cannot merge the two
calls into one row (the adapter counts such a break as `retokenization`).

`SampledTurns` remembers the ids of each prompt + completion the server produced, keyed by their text.
A new prompt whose rendered text starts with a remembered text gets the remembered ids for that part and
the tokenization of the rest. Only ids that decode back to exactly the text they were rendered from are
remembered, so a spliced prompt always spells the text the template rendered.
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from typing import Any, List, Optional, Sequence, Tuple

__all__ = ["SampledTurns"]

_TAIL = 32


class SampledTurns:
    """The `max_entries` most recent (prompt + completion) id sequences, looked up by text prefix.

    Args:
        tokenizer: the served tokenizer (its `decode` must be exact for ids to be remembered; byte-level
            BPE tokenizers are).
        max_entries: how many completions are kept (least recently used ones go first); each costs its
            text and 4 bytes a token.
    """

    def __init__(self, tokenizer: Any, max_entries: int = 512) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self._tokenizer = tokenizer
        self.max_entries = max_entries
        self._entries: OrderedDict[str, array[int]] = OrderedDict()  # 4 bytes an id
        self._lock = threading.Lock()
        self.reused_prompts = 0
        """Prompts that started with a remembered turn and kept its sampled ids."""

    def _decode(self, ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False))

    def _tokenize(self, text: str) -> List[int]:
        return [int(t) for t in self._tokenizer(text, add_special_tokens=False)["input_ids"]]

    def _longest_prefix(self, text: str) -> Optional[Tuple[str, array[int]]]:
        best: Optional[Tuple[str, array[int]]] = None
        with self._lock:
            for key, ids in self._entries.items():
                size = len(key)
                if size > len(text) or (best is not None and size <= len(best[0])):
                    continue
                # Conversations share long system prompts but end differently: compare the ends first.
                tail = max(0, size - _TAIL)
                if text[tail:size] == key[tail:] and text.startswith(key):
                    best = (key, ids)
            if best is not None:
                self._entries.move_to_end(best[0])
                self.reused_prompts += 1
        return best

    def encode(self, text: str) -> List[int]:
        """Token ids of a rendered prompt: a remembered turn's ids for its longest remembered prefix, then the rest."""
        found = self._longest_prefix(text)
        if found is None:
            return self._tokenize(text)
        key, ids = found
        rest = text[len(key) :]
        return ids.tolist() + (self._tokenize(rest) if rest else [])

    def remember(self, prompt_text: str, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> None:
        """Keep `prompt_ids + completion_ids` (when they decode back to the prompt's text) for later prompts."""
        if not completion_ids:
            return
        full = [*prompt_ids, *completion_ids]
        text = self._decode(full)
        if not text.startswith(prompt_text) or self._decode(prompt_ids) != prompt_text:
            return  # the tokenizer does not decode these ids exactly: splicing them could change the text
        with self._lock:
            self._entries[text] = array("i", full)
            self._entries.move_to_end(text)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
