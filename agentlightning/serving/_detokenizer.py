"""Incremental detokenization with stop strings and held-back text, for streaming token by token."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Sequence, Tuple

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas.

    Text is decoded over a short window of recent tokens (not the whole sequence each step) and only
    emitted once it is complete UTF-8. Text that could still be the start of a stop string is held back
    until it cannot; once a stop string appears, the text ends right before it.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, stop: Sequence[str] = ()) -> None:
        self._tokenizer = tokenizer
        self._stop = [s for s in stop if s]
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self._ids: List[int] = []
        self._prefix_offset = 0
        self._read_offset = 0
        self.text = ""
        self._emitted = 0
        self.stopped = False

    def _decode(self, ids: List[int]) -> str:
        return str(self._tokenizer.decode(ids, skip_special_tokens=True))

    def push(self, token_id: int) -> Tuple[str, bool]:
        """Add one token; returns `(visible text delta, hit a stop string)`."""
        if self.stopped:
            return "", True
        self._ids.append(token_id)
        prefix = self._decode(self._ids[self._prefix_offset : self._read_offset])
        full = self._decode(self._ids[self._prefix_offset :])
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            new_text = full[len(prefix) :]
            self._prefix_offset, self._read_offset = self._read_offset, len(self._ids)
            search_from = max(0, len(self.text) - self._hold)
            self.text += new_text
            for stop in self._stop:
                index = self.text.find(stop, search_from)
                if index != -1:
                    self.text, self.stopped = self.text[:index], True
        safe = len(self.text) if self.stopped else max(self._emitted, len(self.text) - self._hold)
        delta = self.text[self._emitted : safe]
        self._emitted = max(self._emitted, safe)
        return delta, self.stopped

    def flush(self) -> str:
        """The held-back text once the sequence is over."""
        delta = self.text[self._emitted :]
        self._emitted = len(self.text)
        return delta
