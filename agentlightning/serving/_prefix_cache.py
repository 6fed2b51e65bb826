"""KV caches of token prefixes, so a prompt that starts like a recent one (a system prompt, few-shot turns,
the earlier turns of a conversation that comes back longer) skips re-encoding what they share."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, List, Optional, Sequence, Tuple


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix every sequence starts with."""
    first = sequences[0]
    length = min(len(s) for s in sequences)
    for other in sequences[1:]:
        k = 0
        while k < length and other[k] == first[k]:
            k += 1
        length = k
    return length


class PrefixCache:
    """The KV blocks of the `max_entries` most recently used token sequences, valid for one weights version.

    A lookup finds the stored sequence that shares the longest prefix with a prompt (the whole stored
    sequence need not match: a conversation's reply re-rendered by the chat template still shares the
    prompt before it). Only matches of at least `min_tokens` tokens are used: shorter ones save less than
    the copy costs. The engine clears the cache whenever the weights change.
    """

    def __init__(self, max_entries: int = 16, min_tokens: int = 16) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self.min_tokens = max(1, min_tokens)
        self._entries: OrderedDict[Tuple[int, ...], Any] = OrderedDict()
        self.hits = 0
        """Prompts that reused a stored prefix."""
        self.reused_tokens = 0
        """Prompt tokens that were not re-encoded thanks to a stored prefix."""

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()

    def longest(self, prompt: Sequence[int]) -> Tuple[int, Optional[Any]]:
        """`(length, block)` of the stored prefix sharing the most tokens with `prompt`, leaving the prompt
        at least one token of its own; `(0, None)` when none shares `min_tokens`."""
        room = len(prompt) - 1
        best, best_key = 0, None
        for key in self._entries:
            if min(len(key), room) <= best:
                continue
            shared = common_prefix_length([key[:room], prompt])
            if shared > best:
                best, best_key = shared, key
        if best_key is None or best < self.min_tokens:
            return 0, None
        self._entries.move_to_end(best_key)
        return best, self._entries[best_key]

    def covered(self, tokens: Sequence[int]) -> bool:
        """Whether a stored sequence already starts with all of `tokens`."""
        n = len(tokens)
        return any(len(key) >= n and key[:n] == tuple(tokens) for key in self._entries)

    def store(self, tokens: Sequence[int], block: Any) -> None:
        """Keep `block` (the KV of `tokens`); stored sequences that `tokens` extends are dropped."""
        key = tuple(tokens)
        for shorter in [k for k in self._entries if len(k) < len(key) and key[: len(k)] == k]:
            del self._entries[shorter]
        self._entries[key] = block
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def keys(self) -> List[Tuple[int, ...]]:
        return list(self._entries)
