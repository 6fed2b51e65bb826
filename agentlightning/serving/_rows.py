"""The state of the choices a `PolicyEngine` decodes: admission (`admission.py`) creates the rows, decode
steps (`engine.py`) feed and end them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from ._detokenizer import IncrementalDetokenizer
from .stream import CompletionStream

__all__ = ["Launched", "Row"]


@dataclass
class Row:
    """One choice being decoded in `slot`."""

    stream: CompletionStream
    index: int
    slot: int
    detokenizer: IncrementalDetokenizer
    version: int
    token_ids: List[int] = field(default_factory=lambda: [])
    logprobs: List[float] = field(default_factory=lambda: [])
    in_flight: int = 0
    """Tokens of a launched decode step not yet landed (0 or 1)."""
    done: bool = False

    @property
    def adapter(self) -> Optional[str]:
        return self.stream.adapter

    @property
    def next_position(self) -> int:
        """Where the last sampled token is written when it is fed back."""
        return len(self.stream.prompt_ids) + len(self.token_ids) - 1

    @property
    def wants_more(self) -> bool:
        """Whether another decode step may still produce a token this row keeps."""
        return not self.done and len(self.token_ids) + self.in_flight < self.stream.params.max_tokens


@dataclass
class Launched:
    """A decode step on its way: the rows it serves (with their slots then) and its tokens' host copy."""

    rows: List[tuple[Row, int]]
    tokens: Any
